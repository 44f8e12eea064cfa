// Runs the real `tandem tokenize` on a shared vocabulary: ids, pieces, --raw, -f, and errors
// reported as one line on stderr with exit status 1.
#include <gtest/gtest.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "test_support.h"

namespace tandem {
namespace {

using testing::SharedDir;

struct Output {
  int code = -1;
  std::string out, err;
};

// Runs `tandem ARGS` through the shell, capturing stdout and stderr.
Output Tandem(const std::string& args) {
  const std::string err_path = ::testing::TempDir() + "tokenize_cli_err." + std::to_string(getpid());
  const std::string cmd = std::string(TANDEM_BIN) + " " + args + " 2>" + err_path;
  Output r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  e.close();
  std::remove(err_path.c_str());
  return r;
}

std::string Spm() {
  return (SharedDir() / "tokenizer" / "ggml-vocab-llama-spm.gguf").string();
}

TEST(TokenizeCliTest, IdsWithAndWithoutRaw) {
  TANDEM_REQUIRE_SHARED(Spm());
  // "Hello world" is case 10 of the shared llama-spm vectors: 15043 3186.
  Output raw = Tandem("tokenize -m " + Spm() + " -p 'Hello world' --ids --raw");
  EXPECT_EQ(raw.code, 0) << raw.err;
  EXPECT_EQ(raw.out, "15043 3186\n");
  Output bos = Tandem("tokenize -m " + Spm() + " -p 'Hello world</s>' --ids");
  EXPECT_EQ(bos.code, 0) << bos.err;
  EXPECT_EQ(bos.out, "1 15043 3186 2\n");  // BOS, and </s> parsed as the EOS token
}

TEST(TokenizeCliTest, PiecesOnePerLine) {
  TANDEM_REQUIRE_SHARED(Spm());
  const std::string path = ::testing::TempDir() + "tokenize_cli_in." + std::to_string(getpid());
  std::ofstream(path) << "Hello world";
  Output r = Tandem("tokenize -m " + Spm() + " -f " + path);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "1\t'<s>'\n15043\t' Hello'\n3186\t' world'\n");
  std::remove(path.c_str());
}

TEST(TokenizeCliTest, ErrorsAreOneLine) {
  TANDEM_REQUIRE_SHARED(Spm());
  const std::vector<std::string> cases = {"tokenize -m " + Spm(),
                                          std::string("tokenize -m /nonexistent.gguf -p x"),
                                          "tokenize -m " + Spm() + " -f /nonexistent.txt"};
  for (const std::string& args : cases) {
    Output r = Tandem(args);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_EQ(r.err.rfind("tandem: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace tandem

// Runs the real `tandem` binary (TANDEM_BIN, set by CMake) in a child process and captures its
// exit status, stdout and stderr.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tandem::testing {

struct RunResult {
  bool exited = false;  // false: killed by a signal
  int code = -1;
  std::string out, err;
};

inline std::string Slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline RunResult RunTandem(const std::vector<std::string>& args) {
  const std::string dir = ::testing::TempDir();
  // Per-process names: CTest runs test executables in parallel.
  const std::string tag = std::to_string(getpid());
  const std::string out = dir + "tandem_cli_out." + tag, err = dir + "tandem_cli_err." + tag;
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(127);
    std::vector<char*> argv;
    std::string bin = TANDEM_BIN;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  RunResult r;
  r.exited = WIFEXITED(status);
  r.code = r.exited ? WEXITSTATUS(status) : -WTERMSIG(status);
  r.out = Slurp(out);
  r.err = Slurp(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

}  // namespace tandem::testing

// `tandem tokenize -m FILE (-p TEXT | -f FILE) [--ids] [--raw]`: the tokens a model's tokenizer
// makes of a text, one "id<TAB>piece" line per token, or only the ids on one line.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "apps/commands.h"
#include "gguf/reader.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tandem::apps {
namespace {

using tokenizer::TokenId;
using tokenizer::Tokenizer;

// A piece on one line: quoted, with control characters, quotes, backslashes and bytes that are
// not valid UTF-8 (a piece may hold part of a character) escaped.
std::string Quoted(std::string_view piece) {
  std::string out = "'";
  char buf[8];
  for (size_t i = 0; i < piece.size();) {
    const auto c = static_cast<unsigned char>(piece[i]);
    char32_t cp;
    const size_t n = tokenizer::DecodeUtf8(piece, i, &cp);
    if (n > 1) {
      out.append(piece.substr(i, n));
      i += n;
      continue;
    }
    ++i;
    switch (c) {
      case '\n':
        out += "\\n";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\'':
        out += "\\'";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      default:
        break;
    }
    if (n == 0 || c < 0x20 || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out + "'";
}

Status Run(const std::string& model, const std::string& prompt, const std::string& file,
           bool ids_only, bool raw) {
  std::string text = prompt;
  if (!file.empty()) {
    TANDEM_ASSIGN_OR_RETURN(text, ReadTextFile(file));
  }
  TANDEM_ASSIGN_OR_RETURN(gguf::GgufFile f, gguf::GgufFile::Open(model));
  Result<Tokenizer> t = Tokenizer::FromGguf(f);
  if (!t.ok()) return t.status().WithContext(model);
  TANDEM_ASSIGN_OR_RETURN(std::vector<TokenId> ids,
                          t->Encode(text, {.add_special = !raw, .parse_special = !raw}));
  if (ids_only) {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) line += ' ';
      line += std::to_string(ids[i]);
    }
    std::printf("%s\n", line.c_str());
  } else {
    for (TokenId id : ids) {
      std::printf("%d\t%s\n", id, Quoted(t->Piece(id, /*render_special=*/true)).c_str());
    }
  }
  return Status::Ok();
}

}  // namespace

void RegisterTokenize(CLI::App& app, int* exit_code) {
  struct Args {
    std::string model, prompt, file;
    bool ids = false;
    bool raw = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("tokenize", "Show the tokens a model's tokenizer makes of a text");
  cmd->add_option("-m,--model", args->model, "GGUF file with a tokenizer")->required();
  CLI::Option* p = cmd->add_option("-p,--prompt", args->prompt, "Text to tokenize");
  CLI::Option* f = cmd->add_option("-f,--file", args->file, "File whose text to tokenize");
  p->excludes(f);
  cmd->add_flag("--ids", args->ids, "Print only the ids, space separated on one line");
  cmd->add_flag("--raw", args->raw, "Add no BOS/EOS and parse no special tokens");
  cmd->callback([args, p, f, exit_code] {
    if (p->count() == 0 && f->count() == 0) {
      *exit_code = ReportError("tokenize: give the text with -p TEXT or -f FILE");
      return;
    }
    Status st = Run(args->model, args->prompt, args->file, args->ids, args->raw);
    if (!st.ok()) *exit_code = ReportError(st.ToString());
  });
}

}  // namespace tandem::apps

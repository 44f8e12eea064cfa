// PreTokenizer: splits text into the pieces a byte-level BPE merges within, by the regular
// expressions that a model family's tokenizer.ggml.pre name stands for.
//
// A family's rule is a list of regexes applied in turn: each one splits every current piece into
// its matches and the text between them (both kept), so the pieces always cover the text in
// order. The regexes are the published ones (Hugging Face tokenizer.json / llama.cpp) and run on
// ICU's regex engine, which has \p{L}, \p{N}, \p{P} and lookahead. Text that is not valid UTF-8
// is split too: each stray byte is seen by the regexes as U+FFFD and stays a byte of its piece.
//
// Thread safety: immutable after Create(); Split() may be called from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tandem::tokenizer {

// A piece as byte offsets [begin, end) into the text.
struct Piece {
  uint32_t begin = 0;
  uint32_t end = 0;
};

class PreTokenizer {
 public:
  // InvalidArgument naming the supported families if `name` is not one of them.
  static Result<PreTokenizer> Create(std::string_view name);
  // "gpt-2, llama-bpe, qwen2, ..." for messages and help texts.
  static std::string SupportedNames();

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  const std::string& name() const { return name_; }

  // Replaces *pieces with the pieces of `text`. REQUIRES: text.size() < 4 GiB.
  Status Split(std::string_view text, std::vector<Piece>* pieces) const;

 private:
  struct Patterns;
  PreTokenizer() = default;

  std::string name_;
  std::unique_ptr<Patterns> patterns_;
};

}  // namespace tandem::tokenizer

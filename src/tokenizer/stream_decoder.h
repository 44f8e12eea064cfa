// Streaming detokenization: text that is valid UTF-8 at every step, while tokens arrive one by
// one and a character may be split across several of them (byte-fallback tokens, byte-level BPE).
//
// Utf8StreamDecoder holds back the bytes of an unfinished character until the rest arrives;
// bytes that can never form a character are replaced by U+FFFD, one per byte. Finish() flushes
// a character left unfinished at the end as U+FFFD.
// DetokenizeStream puts a Tokenizer's pieces through such a decoder.
//
// Thread safety: none; one object per stream. Lifetime: DetokenizeStream refers to its
// Tokenizer, which must outlive it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace tandem::tokenizer {

class Utf8StreamDecoder {
 public:
  // Appends to *out the valid UTF-8 that `bytes` completes.
  void Push(std::string_view bytes, std::string* out);
  // Appends U+FFFD for an unfinished character, if any, and resets.
  void Finish(std::string* out);
  size_t pending() const { return pending_.size(); }

 private:
  std::string pending_;  // at most 3 bytes: the start of an unfinished character
};

class DetokenizeStream {
 public:
  explicit DetokenizeStream(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(tokenizer), render_special_(render_special) {}

  // Appends to *out the text that token `id` completes.
  void Push(TokenId id, std::string* out);
  void Finish(std::string* out) { decoder_.Finish(out); }

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  Utf8StreamDecoder decoder_;
  std::string piece_;  // reused between tokens
};

}  // namespace tandem::tokenizer

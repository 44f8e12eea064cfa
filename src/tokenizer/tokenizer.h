// Tokenizer: text to token ids and back, for the vocabulary a GGUF file carries.
//
// Encode() handles the whole prompt: special tokens written in the text (see special_split.h),
// then each plain run through the SentencePiece or byte-level BPE encoder, with BOS/EOS added as
// the vocabulary asks. Results match llama.cpp's tokenizer on the vocabularies it supports here.
// Pieces and Detokenize() turn ids back into bytes; a token may hold part of a UTF-8 character,
// so text shown while generating goes through DetokenizeStream (stream_decoder.h).
//
// Thread safety: immutable after Create(); const methods may be called from any thread.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/reader.h"
#include "tokenizer/vocab.h"

namespace tandem::tokenizer {

class SpmEncoder;
class BpeEncoder;
class SpecialSplitter;

struct EncodeOptions {
  bool add_special = true;     // add BOS/EOS where the vocabulary asks for them
  bool parse_special = false;  // recognise control tokens written in the text ("<|im_start|>")
};

class Tokenizer {
 public:
  // Reads and validates the vocabulary in `file`; the Tokenizer does not refer to `file` later.
  static Result<Tokenizer> FromGguf(const gguf::GgufFile& file);
  static Result<Tokenizer> FromVocab(Vocab vocab);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  const Vocab& vocab() const { return *vocab_; }

  // Appends the tokens of `text` to *out. Any bytes are accepted (invalid UTF-8 included).
  Status Encode(std::string_view text, const EncodeOptions& options,
                std::vector<TokenId>* out) const;
  Result<std::vector<TokenId>> Encode(std::string_view text,
                                      const EncodeOptions& options = {}) const;

  // Appends the bytes token `id` stands for: normal tokens their text (SentencePiece: "▁" as a
  // space; BPE: byte-level decoded), byte tokens their byte, user-defined tokens their text,
  // control and unknown tokens their text only if `render_special`. Unknown ids append nothing.
  void AppendPiece(TokenId id, bool render_special, std::string* out) const;
  std::string Piece(TokenId id, bool render_special) const;

  // The bytes of a whole sequence. For SentencePiece vocabularies with a space prefix, the one
  // space the encoder put before the text (after a leading BOS, if any) is removed again.
  std::string Detokenize(std::span<const TokenId> ids, bool render_special = false) const;

 private:
  Tokenizer();

  std::unique_ptr<const Vocab> vocab_;  // heap-held: the encoders refer to it
  std::unique_ptr<const SpecialSplitter> special_;
  std::unique_ptr<const SpmEncoder> spm_;
  std::unique_ptr<const BpeEncoder> bpe_;
};

}  // namespace tandem::tokenizer

// SpmEncoder: SentencePiece-style encoding of one run of text (no special tokens in it).
//
// The text is first escaped: an optional leading space, then every ' ' becomes U+2581 ("▁").
// It is split into characters (by lead byte), and the adjacent pair whose concatenation is a
// vocabulary token with the highest score is merged, again and again (ties: the leftmost pair).
// A final symbol that is not a token is written as byte tokens <0xNN> (byte fallback), else as
// the one-byte token, else as the unknown token.
//
// For speed the text is first cut where no merge can ever reach across: between two characters
// that are adjacent in no vocabulary token. The pieces merge independently, with the same
// result as one pass over the whole text (merges on either side of such a cut never interact),
// but with small queues.
//
// Thread safety: immutable after construction; Encode() may run on several threads at once.
// Lifetime: keeps a reference to the Vocab, which must outlive it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "tokenizer/vocab.h"

namespace tandem::tokenizer {

class SpmEncoder {
 public:
  explicit SpmEncoder(const Vocab& vocab);

  // Escapes `text` (with a leading space if `space_prefix`) and appends its tokens to *out.
  void Encode(std::string_view text, bool space_prefix, std::vector<TokenId>* out) const;

 private:
  struct Scratch;
  void EncodeEscaped(std::string_view text, std::vector<TokenId>* out) const;
  void MergeSegment(std::string_view text, Scratch* scratch, std::vector<TokenId>* out) const;

  const Vocab& vocab_;
  std::array<TokenId, 256> byte_token_;  // byte fallback per byte value; kNoToken if none
  // Pairs of adjacent characters (see PairKey in spm.cc) found inside some token's text.
  std::unordered_set<uint64_t> inner_pairs_;
};

}  // namespace tandem::tokenizer

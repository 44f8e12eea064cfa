// BpeEncoder: byte-level BPE encoding of one run of text (no special tokens in it).
//
// The pre-tokenizer splits the text into pieces; each piece's bytes become byte-level symbols
// (one per byte, see byte_level.h) and the adjacent pair with the lowest merge rank is merged,
// again and again (ties: the leftmost pair). Symbols are interned strings: every token text and
// every side and result of a merge has an id (token ids first), so a merge is a hash look-up of
// two integers. A final symbol that is not a token is written byte by byte as the one-character
// tokens that exist. With `ignore_merges` (Llama 3) a piece that is a token as a whole is
// that token.
//
// Thread safety: immutable after Create(); Encode() may run on several threads at once.
// Lifetime: keeps a reference to the Vocab, which must outlive it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace tandem::tokenizer {

class BpeEncoder {
 public:
  // InvalidArgument if the vocabulary's pre-tokenizer name is not supported.
  static Result<BpeEncoder> Create(const Vocab& vocab);

  // Appends the tokens of `text` to *out.
  Status Encode(std::string_view text, std::vector<TokenId>* out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of the merged string
  };
  struct Symbol {
    int32_t sym;  // interned id, -1 if the character takes part in no merge and is no token
    int prev;
    int next;
    uint32_t begin;  // byte range in the original text
    uint32_t len;    // 0 once merged into its left neighbour
  };
  struct Bigram {
    int32_t rank;
    int left;
    int right;
    int32_t left_sym;
    int32_t right_sym;
  };
  struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Bigram> heap;
    std::string encoded;
  };

  BpeEncoder(const Vocab& vocab, PreTokenizer pre);
  int32_t Intern(const std::string& s);
  const Merge* FindMerge(int32_t left, int32_t right) const;
  void EncodeWord(std::string_view word, Scratch* scratch, std::vector<TokenId>* out) const;
  void EmitFallback(std::string_view bytes, std::vector<TokenId>* out) const;

  const Vocab* vocab_;
  PreTokenizer pre_;
  bool ignore_merges_ = false;
  TextToId extra_ids_;                          // interned strings that are not tokens
  std::array<int32_t, 256> byte_sym_{};         // symbol id of each byte's mapped character
  std::unordered_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> merge
};

}  // namespace tandem::tokenizer

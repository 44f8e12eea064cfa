// SpecialSplitter: finds special tokens (control, user-defined, unknown) written out in a text.
//
// The result is a list of fragments: runs of plain text and special tokens, in order. The rule is
// llama.cpp's: the special tokens are tried longest first, and each one takes every leftmost,
// non-overlapping occurrence inside the text still left plain. User-defined tokens are always
// recognised; control and unknown tokens only when `parse_special` is set. The scan visits each
// byte once and compares only the tokens that start with that byte.
//
// Thread safety: immutable after construction; Split() may run on several threads at once.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace tandem::tokenizer {

struct Fragment {
  TokenId token = kNoToken;  // a special token, or kNoToken for plain text
  size_t begin = 0;          // byte range of the fragment in the text
  size_t end = 0;
};

class SpecialSplitter {
 public:
  explicit SpecialSplitter(const Vocab& vocab);

  void Split(std::string_view text, bool parse_special, std::vector<Fragment>* out) const;

 private:
  struct Candidate {
    TokenId id;
    std::string_view text;  // points into the Vocab
    bool always;            // user-defined: recognised even without parse_special
  };
  // Candidates by first byte, each list longest first.
  std::array<std::vector<Candidate>, 256> by_first_byte_;
  bool any_always_ = false;
};

}  // namespace tandem::tokenizer

#include "tokenizer/spm.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/utf8.h"

namespace tandem::tokenizer {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

struct Symbol {
  int prev;
  int next;
  uint32_t begin;
  uint32_t len;  // 0 once merged into its left neighbour
};

struct Bigram {
  float score;
  int left;
  int right;
  uint32_t len;  // bytes of the merged text when the bigram was made
};

// Max-heap order: higher score first, then the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

// A character (1-4 bytes, its length given by its first byte) packed into 32 bits.
uint32_t PackChar(std::string_view c) {
  uint32_t v = 0;
  for (char b : c) v = (v << 8) | static_cast<uint8_t>(b);
  return v;
}

uint64_t PairKey(std::string_view left, std::string_view right) {
  return (static_cast<uint64_t>(PackChar(left)) << 32) | PackChar(right);
}

// Length of the character at s[i], by its lead byte, clamped to the end of s.
size_t CharLen(std::string_view s, size_t i) {
  return std::min(s.size() - i, Utf8LeadLength(static_cast<uint8_t>(s[i])));
}

}  // namespace

struct SpmEncoder::Scratch {
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

SpmEncoder::SpmEncoder(const Vocab& vocab) : vocab_(vocab) {
  for (TokenId id = 0; static_cast<size_t>(id) < vocab.size(); ++id) {
    const std::string_view t = vocab.token(id).text;
    size_t prev = 0, prev_len = 0;
    for (size_t i = 0; i < t.size();) {
      const size_t n = CharLen(t, i);
      if (i > 0) inner_pairs_.insert(PairKey(t.substr(prev, prev_len), t.substr(i, n)));
      prev = i;
      prev_len = n;
      i += n;
    }
  }
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    TokenId id = vocab.Find(hex);
    if (id == kNoToken) id = vocab.Find(std::string(1, static_cast<char>(b)));
    if (id == kNoToken) id = vocab.unk();
    byte_token_[b] = id;
  }
}

void SpmEncoder::Encode(std::string_view text, bool space_prefix, std::vector<TokenId>* out) const {
  std::string escaped;
  escaped.reserve(text.size() + text.size() / 4 + 3);
  if (space_prefix) escaped += kSpaceMark;
  for (char c : text) {
    if (c == ' ') {
      escaped += kSpaceMark;
    } else {
      escaped.push_back(c);
    }
  }
  EncodeEscaped(escaped, out);
}

void SpmEncoder::EncodeEscaped(std::string_view text, std::vector<TokenId>* out) const {
  Scratch scratch;
  size_t start = 0, prev = 0, prev_len = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = CharLen(text, i);
    if (i > 0 && !inner_pairs_.contains(PairKey(text.substr(prev, prev_len), text.substr(i, n)))) {
      MergeSegment(text.substr(start, i - start), &scratch, out);
      start = i;
    }
    prev = i;
    prev_len = n;
    i += n;
  }
  MergeSegment(text.substr(start), &scratch, out);
}

void SpmEncoder::MergeSegment(std::string_view text, Scratch* scratch,
                              std::vector<TokenId>* out) const {
  if (text.empty()) return;
  std::vector<Symbol>& symbols = scratch->symbols;
  std::vector<Bigram>& heap = scratch->heap;
  symbols.clear();
  heap.clear();
  for (size_t i = 0; i < text.size();) {
    const size_t n = CharLen(text, i);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, i + n == text.size() ? -1 : index + 1, static_cast<uint32_t>(i),
                       static_cast<uint32_t>(n)});
    i += n;
  }

  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    const TokenId id = vocab_.Find(text.substr(l.begin, l.len + r.len));
    if (id == kNoToken) return;
    heap.push_back({vocab_.token(id).score, left, right, l.len + r.len});
    std::push_heap(heap.begin(), heap.end(), BigramLess());
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramLess());
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Stale if either side has changed since the bigram was made.
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = text.substr(s.begin, s.len);
    // Merged symbols are tokens by construction; single characters may not be.
    const TokenId id = vocab_.Find(piece);
    if (id != kNoToken) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      const TokenId byte = byte_token_[static_cast<uint8_t>(c)];
      if (byte != kNoToken) out->push_back(byte);
    }
  }
}

}  // namespace tandem::tokenizer

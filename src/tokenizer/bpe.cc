#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace tandem::tokenizer {
namespace {

// Min-heap order through std::push_heap's max-heap: lower rank first, then the leftmost pair.
struct BigramAfter {
  template <typename B>
  bool operator()(const B& a, const B& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

BpeEncoder::BpeEncoder(const Vocab& vocab, PreTokenizer pre)
    : vocab_(&vocab), pre_(std::move(pre)) {}

Result<BpeEncoder> BpeEncoder::Create(const Vocab& vocab) {
  TANDEM_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::Create(vocab.pre()));
  BpeEncoder e(vocab, std::move(pre));
  e.ignore_merges_ = e.pre_.name() == "llama-bpe";
  e.merges_.reserve(vocab.merges().size());
  for (size_t rank = 0; rank < vocab.merges().size(); ++rank) {
    const auto& [a, b] = vocab.merges()[rank];
    const int32_t left = e.Intern(a);
    const int32_t right = e.Intern(b);
    const int32_t result = e.Intern(a + b);
    e.merges_.emplace(PairKey(left, right),
                      Merge{static_cast<int32_t>(rank), result});  // first wins
  }
  for (int byte = 0; byte < 256; ++byte) {
    std::string ch;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(byte)), &ch);
    const TokenId id = vocab.Find(ch);
    if (id != kNoToken) {
      e.byte_sym_[byte] = id;
    } else {
      auto it = e.extra_ids_.find(ch);
      e.byte_sym_[byte] = it == e.extra_ids_.end() ? -1 : it->second;
    }
  }
  return e;
}

int32_t BpeEncoder::Intern(const std::string& s) {
  const TokenId id = vocab_->Find(s);
  if (id != kNoToken) return id;
  auto [it, added] =
      extra_ids_.try_emplace(s, static_cast<int32_t>(vocab_->size() + extra_ids_.size()));
  return it->second;
}

const BpeEncoder::Merge* BpeEncoder::FindMerge(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return nullptr;
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

Status BpeEncoder::Encode(std::string_view text, std::vector<TokenId>* out) const {
  std::vector<Piece> pieces;
  TANDEM_RETURN_IF_ERROR(pre_.Split(text, &pieces));
  Scratch scratch;
  for (const Piece& p : pieces) {
    EncodeWord(text.substr(p.begin, p.end - p.begin), &scratch, out);
  }
  return Status::Ok();
}

void BpeEncoder::EncodeWord(std::string_view word, Scratch* scratch,
                            std::vector<TokenId>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    scratch->encoded.clear();
    AppendByteLevel(word, &scratch->encoded);
    const TokenId id = vocab_->Find(scratch->encoded);
    if (id != kNoToken) {
      out->push_back(id);
      return;
    }
  }

  std::vector<Symbol>& symbols = scratch->symbols;
  std::vector<Bigram>& heap = scratch->heap;
  symbols.clear();
  heap.clear();
  const int n = static_cast<int>(word.size());
  for (int i = 0; i < n; ++i) {
    symbols.push_back({byte_sym_[static_cast<uint8_t>(word[i])], i - 1, i + 1 == n ? -1 : i + 1,
                       static_cast<uint32_t>(i), 1});
  }
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Merge* m = FindMerge(symbols[left].sym, symbols[right].sym);
    if (m == nullptr) return;
    heap.push_back({m->rank, left, right, symbols[left].sym, symbols[right].sym});
    std::push_heap(heap.begin(), heap.end(), BigramAfter());
  };
  for (int i = 1; i < n; ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), BigramAfter());
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Stale if either side has changed since the bigram was made (symbols only ever grow).
    if (l.len == 0 || r.len == 0 || l.next != b.right || l.sym != b.left_sym ||
        r.sym != b.right_sym) {
      continue;
    }
    l.sym = FindMerge(l.sym, r.sym)->result;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.sym >= 0 && static_cast<size_t>(s.sym) < vocab_->size()) {
      out->push_back(s.sym);
    } else {
      EmitFallback(word.substr(s.begin, s.len), out);
    }
  }
}

// A symbol that is no token: each byte of its byte-level text, where that byte alone is a token.
void BpeEncoder::EmitFallback(std::string_view bytes, std::vector<TokenId>* out) const {
  std::string encoded;
  AppendByteLevel(bytes, &encoded);
  for (char c : encoded) {
    const TokenId id = vocab_->Find(std::string_view(&c, 1));
    if (id != kNoToken) out->push_back(id);
  }
}

}  // namespace tandem::tokenizer

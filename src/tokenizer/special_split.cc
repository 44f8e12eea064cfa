#include "tokenizer/special_split.h"

#include <algorithm>
#include <map>

namespace tandem::tokenizer {
namespace {

struct Occurrence {
  size_t pos;
  TokenId id;
  size_t len;
};

}  // namespace

SpecialSplitter::SpecialSplitter(const Vocab& vocab) {
  for (TokenId id = 0; static_cast<size_t>(id) < vocab.size(); ++id) {
    const TokenData& t = vocab.token(id);
    const bool user = t.type == TokenType::kUserDefined;
    if (t.text.empty() ||
        !(user || t.type == TokenType::kControl || t.type == TokenType::kUnknown)) {
      continue;
    }
    by_first_byte_[static_cast<uint8_t>(t.text[0])].push_back({id, t.text, user});
    any_always_ = any_always_ || user;
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [](const Candidate& a, const Candidate& b) {
      return a.text.size() > b.text.size();
    });
  }
}

void SpecialSplitter::Split(std::string_view text, bool parse_special,
                            std::vector<Fragment>* out) const {
  out->clear();
  std::vector<Occurrence> found;
  if (parse_special || any_always_) {
    for (size_t pos = 0; pos < text.size(); ++pos) {
      for (const Candidate& c : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
        if (!c.always && !parse_special) continue;
        if (text.substr(pos, c.text.size()) == c.text) {
          found.push_back({pos, c.id, c.text.size()});
        }
      }
    }
  }
  if (found.empty()) {
    if (!text.empty()) out->push_back({kNoToken, 0, text.size()});
    return;
  }
  // Try tokens longest first (then by id); each takes its occurrences left to right where the
  // text is still plain.
  std::stable_sort(found.begin(), found.end(), [](const Occurrence& a, const Occurrence& b) {
    if (a.len != b.len) return a.len > b.len;
    if (a.id != b.id) return a.id < b.id;
    return a.pos < b.pos;
  });
  std::map<size_t, Occurrence> taken;  // by start position
  for (const Occurrence& o : found) {
    auto next = taken.lower_bound(o.pos);
    if (next != taken.end() && next->first < o.pos + o.len) continue;
    if (next != taken.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.len > o.pos) continue;
    }
    taken.emplace(o.pos, o);
  }
  size_t pos = 0;
  for (const auto& [start, o] : taken) {
    if (start > pos) out->push_back({kNoToken, pos, start});
    out->push_back({o.id, start, start + o.len});
    pos = start + o.len;
  }
  if (pos < text.size()) out->push_back({kNoToken, pos, text.size()});
}

}  // namespace tandem::tokenizer

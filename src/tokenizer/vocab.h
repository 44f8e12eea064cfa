// Vocab: a tokenizer's vocabulary and settings as read, and validated, from GGUF metadata.
//
// Keys read (all under "tokenizer."): ggml.model ("llama": SentencePiece, "gpt2": byte-level
// BPE), ggml.pre, ggml.tokens, ggml.scores, ggml.token_type, ggml.merges, ggml.bos_token_id,
// ggml.eos_token_id, ggml.unknown_token_id, ggml.padding_token_id, ggml.add_bos_token,
// ggml.add_eos_token, ggml.add_space_prefix, chat_template.
// Every value is checked: array lengths agree, token types are known, ids are in range (-1, also
// written as the u32 0xFFFFFFFF, means "none"), scores are finite, merges read "a b". Defaults
// follow llama.cpp: SentencePiece vocabularies add BOS (id 1) and a space prefix; BPE vocabularies
// add BOS only for the llama-bpe pre-tokenizer unless the file says so.
//
// Thread safety: immutable after FromGguf(); const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "gguf/reader.h"

namespace tandem::tokenizer {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// GGUF token types (tokenizer.ggml.token_type values).
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class VocabType { kSpm, kBpe };

struct TokenData {
  std::string text;
  float score = 0;
  TokenType type = TokenType::kNormal;
};

// Heterogeneous lookup: find a std::string key by std::string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TextToId = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

class Vocab {
 public:
  static Result<Vocab> FromGguf(const gguf::GgufFile& file);

  VocabType type() const { return type_; }
  // tokenizer.ggml.pre ("default" if absent).
  const std::string& pre() const { return pre_; }
  size_t size() const { return tokens_.size(); }
  bool Contains(TokenId id) const { return id >= 0 && static_cast<size_t>(id) < tokens_.size(); }
  // REQUIRES: Contains(id).
  const TokenData& token(TokenId id) const { return tokens_[static_cast<size_t>(id)]; }
  // The token whose text is exactly `text` (the last one if several share it), or kNoToken.
  TokenId Find(std::string_view text) const;

  // BPE merges in rank order (rank = index), each split at its separating space.
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }

  TokenId bos() const { return bos_; }  // kNoToken if the vocabulary has none
  TokenId eos() const { return eos_; }
  TokenId unk() const { return unk_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // tokenizer.chat_template, if present.
  const std::optional<std::string>& chat_template() const { return chat_template_; }

 private:
  Vocab() = default;
  Status ReadTokens(const gguf::GgufFile& file);
  Status ReadMerges(const gguf::GgufFile& file);
  Status ReadSpecialIds(const gguf::GgufFile& file);

  VocabType type_ = VocabType::kSpm;
  std::string pre_ = "default";
  std::vector<TokenData> tokens_;
  TextToId text_to_id_;
  std::vector<std::pair<std::string, std::string>> merges_;
  TokenId bos_ = kNoToken, eos_ = kNoToken, unk_ = kNoToken;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  std::optional<std::string> chat_template_;
};

}  // namespace tandem::tokenizer

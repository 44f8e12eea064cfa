#include "tokenizer/vocab.h"

#include <cmath>

namespace tandem::tokenizer {
namespace {

using gguf::Array;
using gguf::GgufFile;
using gguf::ValueType;

constexpr size_t kMaxVocab = size_t{1} << 24;  // 16M tokens: far past any real vocabulary

Status BadKey(std::string_view key, const std::string& what) {
  return Status::Corruption("tokenizer: " + std::string(key) + ": " + what);
}

// A missing key yields `fallback`; a key of the wrong type is an error.
Result<bool> OptionalBool(const GgufFile& f, std::string_view key, bool fallback) {
  if (f.Find(key) == nullptr) return fallback;
  Result<bool> v = f.GetBool(key);
  if (!v.ok()) return BadKey(key, v.status().message());
  return *v;
}

// A missing key, or the value -1, yields kNoToken; other ids must name a token.
Result<TokenId> OptionalId(const GgufFile& f, std::string_view key, size_t n_vocab) {
  if (f.Find(key) == nullptr) return kNoToken;
  Result<int64_t> v = f.GetInt(key);
  if (!v.ok()) return BadKey(key, v.status().message());
  // Converters write -1 (often as the u32 0xFFFFFFFF) for "no such token".
  if (*v == -1 || *v == 0xFFFFFFFF) return kNoToken;
  if (*v < 0 || static_cast<uint64_t>(*v) >= n_vocab) {
    return BadKey(key, "token id " + std::to_string(*v) + " is outside the vocabulary of " +
                           std::to_string(n_vocab) + " tokens");
  }
  return static_cast<TokenId>(*v);
}

Result<const Array*> ArrayOf(const GgufFile& f, std::string_view key, size_t expected_size) {
  Result<const Array*> a = f.GetArray(key);
  if (!a.ok()) return BadKey(key, a.status().message());
  if ((*a)->size() != expected_size) {
    return BadKey(key, "has " + std::to_string((*a)->size()) + " entries, the vocabulary has " +
                           std::to_string(expected_size) + " tokens");
  }
  return *a;
}

bool IsNumeric(ValueType t) {
  return t != ValueType::kString && t != ValueType::kArray;
}

}  // namespace

TokenId Vocab::Find(std::string_view text) const {
  auto it = text_to_id_.find(text);
  return it == text_to_id_.end() ? kNoToken : it->second;
}

Result<Vocab> Vocab::FromGguf(const GgufFile& file) {
  Vocab v;
  Result<std::string> model = file.GetString("tokenizer.ggml.model");
  if (!model.ok()) {
    return Status::NotFound("tokenizer: no tokenizer in this file (tokenizer.ggml.model: " +
                            model.status().message() + ")");
  }
  if (*model == "llama") {
    v.type_ = VocabType::kSpm;
  } else if (*model == "gpt2") {
    v.type_ = VocabType::kBpe;
  } else {
    return Status::Unsupported("tokenizer: tokenizer.ggml.model \"" + *model +
                               "\" is not supported (supported: llama, gpt2)");
  }
  if (file.Find("tokenizer.ggml.pre") != nullptr) {
    Result<std::string> pre = file.GetString("tokenizer.ggml.pre");
    if (!pre.ok()) return BadKey("tokenizer.ggml.pre", pre.status().message());
    v.pre_ = *pre;
  }
  TANDEM_RETURN_IF_ERROR(v.ReadTokens(file));
  if (v.type_ == VocabType::kBpe) TANDEM_RETURN_IF_ERROR(v.ReadMerges(file));
  TANDEM_RETURN_IF_ERROR(v.ReadSpecialIds(file));
  if (file.Find("tokenizer.chat_template") != nullptr) {
    Result<std::string> t = file.GetString("tokenizer.chat_template");
    if (!t.ok()) return BadKey("tokenizer.chat_template", t.status().message());
    v.chat_template_ = *t;
  }
  return v;
}

Status Vocab::ReadTokens(const GgufFile& file) {
  Result<const Array*> texts = file.GetArray("tokenizer.ggml.tokens");
  if (!texts.ok()) return BadKey("tokenizer.ggml.tokens", texts.status().message());
  const Array& t = **texts;
  if (t.elem_type() != ValueType::kString) return BadKey("tokenizer.ggml.tokens", "not strings");
  if (t.size() == 0 || t.size() > kMaxVocab) {
    return BadKey("tokenizer.ggml.tokens", "has " + std::to_string(t.size()) + " tokens");
  }
  const size_t n = t.size();
  tokens_.resize(n);
  text_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    tokens_[i].text = t.strings()[i];
    text_to_id_[tokens_[i].text] = static_cast<TokenId>(i);  // the last of duplicates wins
  }

  if (file.Find("tokenizer.ggml.scores") != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(const Array* scores, ArrayOf(file, "tokenizer.ggml.scores", n));
    if (!IsNumeric(scores->elem_type())) return BadKey("tokenizer.ggml.scores", "not numbers");
    for (size_t i = 0; i < n; ++i) {
      const double s = scores->AsDouble(i);
      if (!std::isfinite(s)) {
        return BadKey("tokenizer.ggml.scores",
                      "score of token " + std::to_string(i) + " is not a finite number");
      }
      tokens_[i].score = static_cast<float>(s);
    }
  }

  if (file.Find("tokenizer.ggml.token_type") != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(const Array* types, ArrayOf(file, "tokenizer.ggml.token_type", n));
    if (!IsNumeric(types->elem_type()) || types->elem_type() == ValueType::kFloat32 ||
        types->elem_type() == ValueType::kFloat64) {
      return BadKey("tokenizer.ggml.token_type", "not integers");
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t ty = types->AsInt64(i);
      if (ty < 0 || ty > static_cast<int64_t>(TokenType::kByte)) {
        return BadKey("tokenizer.ggml.token_type",
                      "token " + std::to_string(i) + " has unknown type " + std::to_string(ty));
      }
      tokens_[i].type = static_cast<TokenType>(ty);
    }
  }
  return Status::Ok();
}

Status Vocab::ReadMerges(const GgufFile& file) {
  Result<const Array*> merges = file.GetArray("tokenizer.ggml.merges");
  if (!merges.ok()) return BadKey("tokenizer.ggml.merges", merges.status().message());
  if ((*merges)->elem_type() != ValueType::kString) {
    return BadKey("tokenizer.ggml.merges", "not strings");
  }
  const std::vector<std::string>& list = (*merges)->strings();
  merges_.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string& m = list[i];
    // The separator is the first space after the first byte (a side may itself be a space).
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size()) {
      return BadKey("tokenizer.ggml.merges", "merge " + std::to_string(i) + " is not \"a b\"");
    }
    merges_.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  return Status::Ok();
}

Status Vocab::ReadSpecialIds(const GgufFile& file) {
  const size_t n = tokens_.size();
  const bool spm = type_ == VocabType::kSpm;
  // Defaults as llama.cpp: SentencePiece <unk>=0, <s>=1, </s>=2 when the file names none.
  if (spm) {
    unk_ = n > 0 ? 0 : kNoToken;
    bos_ = n > 1 ? 1 : kNoToken;
    eos_ = n > 2 ? 2 : kNoToken;
  }
  TANDEM_ASSIGN_OR_RETURN(TokenId bos, OptionalId(file, "tokenizer.ggml.bos_token_id", n));
  TANDEM_ASSIGN_OR_RETURN(TokenId eos, OptionalId(file, "tokenizer.ggml.eos_token_id", n));
  TANDEM_ASSIGN_OR_RETURN(TokenId unk, OptionalId(file, "tokenizer.ggml.unknown_token_id", n));
  TANDEM_ASSIGN_OR_RETURN(TokenId pad, OptionalId(file, "tokenizer.ggml.padding_token_id", n));
  (void)pad;  // validated only: nothing here pads
  if (bos != kNoToken) bos_ = bos;
  if (eos != kNoToken) eos_ = eos;
  if (unk != kNoToken) unk_ = unk;

  const bool default_bos = spm || pre_ == "llama-bpe";
  TANDEM_ASSIGN_OR_RETURN(add_bos_,
                          OptionalBool(file, "tokenizer.ggml.add_bos_token", default_bos));
  TANDEM_ASSIGN_OR_RETURN(add_eos_, OptionalBool(file, "tokenizer.ggml.add_eos_token", false));
  TANDEM_ASSIGN_OR_RETURN(add_space_prefix_,
                          OptionalBool(file, "tokenizer.ggml.add_space_prefix", spm));
  if (add_bos_ && bos_ == kNoToken) {
    return BadKey("tokenizer.ggml.add_bos_token", "is true but the vocabulary has no BOS token");
  }
  if (add_eos_ && eos_ == kNoToken) {
    return BadKey("tokenizer.ggml.add_eos_token", "is true but the vocabulary has no EOS token");
  }
  return Status::Ok();
}

}  // namespace tandem::tokenizer

#include "tokenizer/tokenizer.h"

#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/special_split.h"
#include "tokenizer/spm.h"

namespace tandem::tokenizer {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581

// "<0x41>" -> 0x41; -1 if the text is not of that form.
int ByteTokenValue(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int v = 0;
  for (char c : text.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::FromGguf(const gguf::GgufFile& file) {
  TANDEM_ASSIGN_OR_RETURN(Vocab vocab, Vocab::FromGguf(file));
  return FromVocab(std::move(vocab));
}

Result<Tokenizer> Tokenizer::FromVocab(Vocab vocab) {
  Tokenizer t;
  t.vocab_ = std::make_unique<const Vocab>(std::move(vocab));
  t.special_ = std::make_unique<const SpecialSplitter>(*t.vocab_);
  if (t.vocab_->type() == VocabType::kSpm) {
    t.spm_ = std::make_unique<const SpmEncoder>(*t.vocab_);
  } else {
    Result<BpeEncoder> bpe = BpeEncoder::Create(*t.vocab_);
    if (!bpe.ok()) return bpe.status().WithContext("tokenizer");
    t.bpe_ = std::make_unique<const BpeEncoder>(std::move(bpe).value());
  }
  return t;
}

Status Tokenizer::Encode(std::string_view text, const EncodeOptions& options,
                         std::vector<TokenId>* out) const {
  const Vocab& v = *vocab_;
  if (options.add_special && v.add_bos()) out->push_back(v.bos());
  std::vector<Fragment> fragments;
  special_->Split(text, options.parse_special, &fragments);
  // SentencePiece puts a space before the text, and again after each special token.
  bool after_special = true;
  for (const Fragment& f : fragments) {
    if (f.token != kNoToken) {
      out->push_back(f.token);
      after_special = true;
      continue;
    }
    const std::string_view run = text.substr(f.begin, f.end - f.begin);
    if (spm_) {
      spm_->Encode(run, v.add_space_prefix() && after_special, out);
    } else {
      TANDEM_RETURN_IF_ERROR(bpe_->Encode(run, out));
    }
    after_special = false;
  }
  if (options.add_special && v.add_eos()) out->push_back(v.eos());
  return Status::Ok();
}

Result<std::vector<TokenId>> Tokenizer::Encode(std::string_view text,
                                               const EncodeOptions& options) const {
  std::vector<TokenId> out;
  TANDEM_RETURN_IF_ERROR(Encode(text, options, &out));
  return out;
}

void Tokenizer::AppendPiece(TokenId id, bool render_special, std::string* out) const {
  if (!vocab_->Contains(id)) return;
  const TokenData& t = vocab_->token(id);
  switch (t.type) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      if (render_special) out->append(t.text);
      return;
    case TokenType::kUserDefined:
      out->append(t.text);
      return;
    case TokenType::kNormal:
      if (spm_) {
        for (size_t i = 0; i < t.text.size();) {
          if (t.text.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
            out->push_back(' ');
            i += kSpaceMark.size();
          } else {
            out->push_back(t.text[i++]);
          }
        }
      } else {
        AppendFromByteLevel(t.text, out);
      }
      return;
    case TokenType::kByte:
      if (spm_) {
        const int b = ByteTokenValue(t.text);
        if (b >= 0) out->push_back(static_cast<char>(b));
      }
      return;
    case TokenType::kUndefined:
    case TokenType::kUnused:
      return;
  }
}

std::string Tokenizer::Piece(TokenId id, bool render_special) const {
  std::string out;
  AppendPiece(id, render_special, &out);
  return out;
}

std::string Tokenizer::Detokenize(std::span<const TokenId> ids, bool render_special) const {
  std::string out;
  size_t first = 0;
  if (!ids.empty() && ids[0] == vocab_->bos()) {
    AppendPiece(ids[0], render_special, &out);
    first = 1;
  }
  for (size_t i = first; i < ids.size(); ++i) {
    const size_t before = out.size();
    AppendPiece(ids[i], render_special, &out);
    if (i == first && spm_ && vocab_->add_space_prefix() && out.size() > before &&
        out[before] == ' ') {
      out.erase(before, 1);
    }
  }
  return out;
}

}  // namespace tandem::tokenizer

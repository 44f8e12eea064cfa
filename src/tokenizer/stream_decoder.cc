#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace tandem::tokenizer {

void Utf8StreamDecoder::Push(std::string_view bytes, std::string* out) {
  pending_.append(bytes);
  const std::string_view all = pending_;
  // Everything but an unfinished character at the end is decided now.
  const size_t keep = IncompleteUtf8Suffix(all);
  const size_t ready = all.size() - keep;
  for (size_t i = 0; i < ready;) {
    char32_t cp;
    const size_t n = DecodeUtf8(all.substr(0, ready), i, &cp);
    if (n == 0) {
      AppendUtf8(kReplacementChar, out);
      ++i;
    } else {
      out->append(all.substr(i, n));
      i += n;
    }
  }
  pending_.erase(0, ready);
}

void Utf8StreamDecoder::Finish(std::string* out) {
  if (!pending_.empty()) AppendUtf8(kReplacementChar, out);
  pending_.clear();
}

void DetokenizeStream::Push(TokenId id, std::string* out) {
  piece_.clear();
  tokenizer_.AppendPiece(id, render_special_, &piece_);
  decoder_.Push(piece_, out);
}

}  // namespace tandem::tokenizer

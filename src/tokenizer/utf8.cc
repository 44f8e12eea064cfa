#include "tokenizer/utf8.h"

namespace tandem::tokenizer {
namespace {

bool IsContinuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

// Valid range of the second byte after lead `b0` (RFC 3629 table), excluding overlongs and
// surrogates; the remaining bytes are plain continuation bytes.
bool SecondByteOk(uint8_t b0, uint8_t b1) {
  if (b0 == 0xE0) return b1 >= 0xA0 && b1 <= 0xBF;
  if (b0 == 0xED) return b1 >= 0x80 && b1 <= 0x9F;
  if (b0 == 0xF0) return b1 >= 0x90 && b1 <= 0xBF;
  if (b0 == 0xF4) return b1 >= 0x80 && b1 <= 0x8F;
  return IsContinuation(b1);
}

// Sequence length for a valid lead byte, 0 for bytes that never start a sequence.
size_t ValidLeadLength(uint8_t b0) {
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return 2;
  if (b0 >= 0xE0 && b0 <= 0xEF) return 3;
  if (b0 >= 0xF0 && b0 <= 0xF4) return 4;
  return 0;
}

}  // namespace

size_t DecodeUtf8(std::string_view s, size_t i, char32_t* cp) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  const size_t n = ValidLeadLength(b0);
  if (n == 0 || i + n > s.size()) return 0;
  if (n == 1) {
    *cp = b0;
    return 1;
  }
  if (!SecondByteOk(b0, static_cast<uint8_t>(s[i + 1]))) return 0;
  char32_t v = b0 & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (!IsContinuation(b)) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  *cp = v;
  return n;
}

size_t IncompleteUtf8Suffix(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const size_t start = s.size() - back;
    const auto b0 = static_cast<uint8_t>(s[start]);
    if (IsContinuation(b0)) continue;
    const size_t n = ValidLeadLength(b0);
    if (n <= back) return 0;  // complete (or not a lead byte at all)
    // The bytes present must be a valid beginning of that sequence.
    if (back >= 2 && !SecondByteOk(b0, static_cast<uint8_t>(s[start + 1]))) return 0;
    for (size_t k = 2; k < back; ++k) {
      if (!IsContinuation(static_cast<uint8_t>(s[start + k]))) return 0;
    }
    return back;
  }
  return 0;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s) {
  char32_t cp;
  for (size_t i = 0; i < s.size();) {
    const size_t n = DecodeUtf8(s, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace tandem::tokenizer

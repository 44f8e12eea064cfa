#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace tandem::tokenizer {
namespace {

bool MapsToItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> to_cp{};
  std::array<int16_t, 0x200> from_cp{};  // every mapped code point is below U+0200
  Tables() {
    from_cp.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = MapsToItself(b) ? static_cast<char32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToCodePoint(uint8_t byte) {
  return GetTables().to_cp[byte];
}

int CodePointToByte(char32_t cp) {
  return cp < GetTables().from_cp.size() ? GetTables().from_cp[cp] : -1;
}

void AppendByteLevel(std::string_view bytes, std::string* out) {
  for (char c : bytes) AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(c)), out);
}

void AppendFromByteLevel(std::string_view text, std::string* out) {
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    const size_t n = DecodeUtf8(text, i, &cp);
    if (n == 0) {
      out->push_back(text[i]);
      ++i;
      continue;
    }
    const int b = CodePointToByte(cp);
    if (b >= 0) {
      out->push_back(static_cast<char>(b));
    } else {
      out->append(text.substr(i, n));
    }
    i += n;
  }
}

}  // namespace tandem::tokenizer

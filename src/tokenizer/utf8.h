// UTF-8 helpers shared by the tokenizers and the streaming decoder.
//
// Two notions of "character" are used on purpose. Utf8LeadLength() follows the lead byte alone
// (as SentencePiece-style tokenizers do, so that any byte string splits into symbols without
// validation). DecodeUtf8() is strict (no overlong forms, surrogates or values past U+10FFFF) and
// is what the pre-tokenizer and the streaming decoder use to tell valid text from stray bytes.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Bytes in the sequence announced by `lead`, from its top four bits: 1 for ASCII and for stray
// continuation bytes, 2 for 0xC0-0xDF, 3 for 0xE0-0xEF, 4 for 0xF0-0xFF.
inline size_t Utf8LeadLength(uint8_t lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

// Decodes the code point starting at s[i]. Returns the bytes it takes (1-4), or 0 if the bytes
// there are not a valid, complete UTF-8 sequence. REQUIRES: i < s.size().
size_t DecodeUtf8(std::string_view s, size_t i, char32_t* cp);

// How many bytes at the end of `s` are the start of a valid sequence still missing bytes (0-3).
size_t IncompleteUtf8Suffix(std::string_view s);

// Appends the UTF-8 encoding of `cp`. REQUIRES: cp <= 0x10FFFF.
void AppendUtf8(char32_t cp, std::string* out);

bool IsValidUtf8(std::string_view s);

}  // namespace tandem::tokenizer

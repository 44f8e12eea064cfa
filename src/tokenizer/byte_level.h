// The GPT-2 byte-to-unicode mapping used by byte-level BPE vocabularies.
//
// Every byte value maps to one printable code point: '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF
// map to themselves; the other 68 bytes map, in increasing order, to U+0100, U+0101, ...
// A vocabulary's token texts are written in these code points, so "Ġthe" is the bytes " the".
//
// Thread safety: pure functions over constant tables.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::tokenizer {

char32_t ByteToCodePoint(uint8_t byte);

// The byte a code point stands for, or -1 if it is not one of the 256 mapped code points.
int CodePointToByte(char32_t cp);

// Appends the mapped code points of `bytes` as UTF-8.
void AppendByteLevel(std::string_view bytes, std::string* out);

// Decodes byte-level text back to bytes; code points outside the mapping (and invalid UTF-8)
// are copied through unchanged.
void AppendFromByteLevel(std::string_view text, std::string* out);

}  // namespace tandem::tokenizer

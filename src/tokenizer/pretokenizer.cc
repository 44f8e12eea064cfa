#include "tokenizer/pretokenizer.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include "tokenizer/utf8.h"

namespace tandem::tokenizer {
namespace {

struct Family {
  const char* name;
  std::vector<const char*> regexes;
};

// GPT-2 (tiktoken r50k).
const char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3 (tiktoken cl100k). The case-insensitive contractions are spelled out as character
// classes: (?i) would also fold letters such as U+017F (long s) onto ASCII.
const char kLlama3[] =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: as Llama 3 but every digit is its own piece.
const char kQwen2[] =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const std::vector<Family>& Families() {
  static const std::vector<Family> families = {
      {"gpt-2", {kGpt2}},
      {"llama-bpe", {kLlama3}},
      {"qwen2", {kQwen2}},
      {"deepseek-r1-qwen", {kQwen2}},
      // DeepSeek's rules list letters and punctuation by code point; they are written as \x{...}
      // escapes because some of them (U+1FD3, U+2126, U+212A, ...) change under Unicode
      // normalisation, which would silently alter or break the ranges.
      {"deepseek-llm",
       {
           R"([\r\n])",
           R"(\s?[)"
           R"(A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
           R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}-\x{377}\x{37B}-\x{37D}\x{37F}\x{386})"
           R"(\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F})"
           R"(\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA})"
           R"(\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
           R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D})"
           R"(\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4})"
           R"(\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
           R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
           R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
           R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}-\x{2184})"
           R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}-\x{2CF3})"
           R"(\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
           R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
           R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3})"
           R"(\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
           R"(\x{1E900}-\x{1E943})"
           R"(]+)",
           R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
           R"(\s+$)",
           R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
           R"(\p{N}+)",
       }},
      {"deepseek-coder",
       {
           R"([\r\n])",
           R"(\s?\p{L}+)",
           R"(\s?\p{P}+)",
           R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
           R"(\p{N})",
       }},
  };
  return families;
}

// The text as UTF-16 for ICU, with the byte offset of every UTF-16 unit (and of the end).
struct Utf16Text {
  icu::UnicodeString text;
  std::vector<uint32_t> byte_at;

  explicit Utf16Text(std::string_view s) {
    byte_at.reserve(s.size() + 1);
    text = icu::UnicodeString(static_cast<int32_t>(s.size()), 0, 0);
    for (size_t i = 0; i < s.size();) {
      char32_t cp;
      size_t n = DecodeUtf8(s, i, &cp);
      if (n == 0) {  // a stray byte: U+FFFD to the regexes, one byte of the text
        cp = kReplacementChar;
        n = 1;
      }
      const int32_t before = text.length();
      text.append(static_cast<UChar32>(cp));
      for (int32_t k = before; k < text.length(); ++k) byte_at.push_back(static_cast<uint32_t>(i));
      i += n;
    }
    byte_at.push_back(static_cast<uint32_t>(s.size()));
  }
};

}  // namespace

struct PreTokenizer::Patterns {
  std::vector<std::unique_ptr<icu::RegexPattern>> list;
};

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

std::string PreTokenizer::SupportedNames() {
  std::string out;
  for (const Family& f : Families()) {
    if (!out.empty()) out += ", ";
    out += f.name;
  }
  return out;
}

Result<PreTokenizer> PreTokenizer::Create(std::string_view name) {
  for (const Family& f : Families()) {
    if (name != f.name) continue;
    PreTokenizer p;
    p.name_ = f.name;
    p.patterns_ = std::make_unique<Patterns>();
    for (const char* re : f.regexes) {
      UErrorCode status = U_ZERO_ERROR;
      UParseError parse_error;
      std::unique_ptr<icu::RegexPattern> pattern(
          icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(re), 0, parse_error, status));
      if (U_FAILURE(status)) {
        return Status::Internal("pre-tokenizer " + p.name_ + ": regex does not compile (" +
                                u_errorName(status) + "): " + re);
      }
      p.patterns_->list.push_back(std::move(pattern));
    }
    return p;
  }
  return Status::InvalidArgument(
      "tokenizer.ggml.pre \"" + std::string(name) +
      "\" is not a supported pre-tokenizer (supported: " + SupportedNames() + ")");
}

Status PreTokenizer::Split(std::string_view text, std::vector<Piece>* pieces) const {
  pieces->clear();
  if (text.empty()) return Status::Ok();
  const Utf16Text u(text);
  // Work in UTF-16 offsets; convert to bytes at the end.
  std::vector<Piece> current = {{0, static_cast<uint32_t>(u.text.length())}};
  std::vector<Piece> next;
  for (const auto& pattern : patterns_->list) {
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> m(pattern->matcher(u.text, status));
    if (U_FAILURE(status))
      return Status::Internal(std::string("regex matcher: ") + u_errorName(status));
    next.clear();
    next.reserve(current.size());
    for (const Piece& piece : current) {
      m->region(piece.begin, piece.end, status);
      uint32_t pos = piece.begin;
      while (m->find(status) && U_SUCCESS(status)) {
        const auto start = static_cast<uint32_t>(m->start(status));
        const auto end = static_cast<uint32_t>(m->end(status));
        if (end == start) continue;  // none of the rules matches empty text; skip if one did
        if (start > pos) next.push_back({pos, start});
        next.push_back({start, end});
        pos = end;
      }
      if (U_FAILURE(status))
        return Status::Internal(std::string("regex find: ") + u_errorName(status));
      if (pos < piece.end) next.push_back({pos, piece.end});
    }
    current.swap(next);
  }
  pieces->reserve(current.size());
  for (const Piece& p : current) pieces->push_back({u.byte_at[p.begin], u.byte_at[p.end]});
  return Status::Ok();
}

}  // namespace tandem::tokenizer

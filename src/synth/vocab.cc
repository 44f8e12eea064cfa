#include "synth/vocab.h"

#include <cstdio>
#include <string>
#include <vector>

namespace tandem::synth {
namespace {

// GGUF token types.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;

// The n-th word over consonant-vowel syllables ("ka", "ro", ...), n >= 0; distinct n give
// distinct words (bijective base-K numbering).
std::string Word(uint64_t n) {
  static const char* kC = "bdfgklmnprstvz";
  static const char* kV = "aeiou";
  const uint64_t k = 14 * 5;
  std::string w;
  ++n;
  while (n > 0) {
    --n;
    const uint64_t s = n % k;
    w += kC[s / 5];
    w += kV[s % 5];
    n /= k;
  }
  return w;
}

}  // namespace

void AddSyntheticVocab(gguf::GgufWriter& w, uint32_t n_vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {kUnknown, kControl, kControl};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(kByte);
  }
  for (uint64_t i = 0; tokens.size() < n_vocab; ++i) {
    tokens.push_back(i % 2 == 0 ? "\xe2\x96\x81" + Word(i / 2) : Word(i / 2));
    types.push_back(kNormal);
  }
  tokens.resize(n_vocab);
  types.resize(n_vocab);
  std::vector<float> scores(n_vocab);
  for (uint32_t i = 0; i < n_vocab; ++i) scores[i] = i < 259 ? 0.0f : -static_cast<float>(i);
  w.Set("tokenizer.ggml.model", "llama");
  w.Set("tokenizer.ggml.tokens", gguf::Array::Of(tokens));
  w.Set("tokenizer.ggml.scores", gguf::Array::Of(scores));
  w.Set("tokenizer.ggml.token_type", gguf::Array::Of(types));
  w.Set("tokenizer.ggml.unknown_token_id", uint32_t{0});
  w.Set("tokenizer.ggml.bos_token_id", uint32_t{1});
  w.Set("tokenizer.ggml.eos_token_id", uint32_t{2});
  w.Set("tokenizer.ggml.add_bos_token", true);
  w.Set("tokenizer.ggml.add_eos_token", false);
}

}  // namespace tandem::synth

// Tokenizer throughput on ~1 MB of generated English-like text with digits, punctuation and some
// non-ASCII (accents, CJK, emoji), for a SentencePiece and two byte-level BPE vocabularies from
// ../shared/tokenizer. Reports bytes/s. Run: build/bench/tokenize_bench --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "gguf/reader.h"
#include "tokenizer/tokenizer.h"

namespace {

using tandem::tokenizer::TokenId;
using tandem::tokenizer::Tokenizer;

std::filesystem::path SharedDir() {
  if (const char* env = std::getenv("TANDEM_SHARED_DIR")) return env;
  return TANDEM_SHARED_DIR;
}

// Deterministic text of about `bytes` bytes.
std::string MakeText(size_t bytes) {
  static const std::vector<std::string> words = {
      "the",     "of",        "and",         "to",       "in",       "a",          "is",
      "that",    "for",       "it",          "as",       "was",      "with",       "be",
      "by",      "on",        "not",         "he",       "I",        "this",       "are",
      "or",      "his",       "from",        "at",       "which",    "but",        "have",
      "an",      "had",       "they",        "you",      "were",     "their",      "one",
      "all",     "we",        "can",         "her",      "has",      "there",      "been",
      "if",      "more",      "when",        "will",     "would",    "who",        "so",
      "no",      "tokenizer", "distributed", "machines", "pipeline", "activation", "quantization",
      "Tuesday", "London",    "café",        "naïve",    "Müller",   "über",       "résumé",
      "日本語",  "中文",      "Привет",      "мир",      "🦙",     "🚀",          "don't",
      "it's",    "we're",     "O'Brien"};
  static const std::vector<std::string> punct = {
      ",", ".", ";", ":", "!", "?", " -", " (x)", "\"", "...", " 42", " 3.14", " 2025", " #1"};
  std::mt19937 rng(1234);
  std::string text;
  text.reserve(bytes + 64);
  while (text.size() < bytes) {
    const int sentence = 5 + static_cast<int>(rng() % 15);
    for (int i = 0; i < sentence; ++i) {
      std::string w = words[rng() % words.size()];
      if (i == 0) w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
      text += w;
      if (rng() % 6 == 0) text += punct[rng() % punct.size()];
      text += ' ';
    }
    text += rng() % 8 == 0 ? ".\n\n" : ". ";
  }
  return text;
}

void BM_Tokenize(benchmark::State& state, const std::string& vocab) {
  const auto path = SharedDir() / "tokenizer" / vocab;
  tandem::Result<tandem::gguf::GgufFile> f = tandem::gguf::GgufFile::Open(path.string());
  if (!f.ok()) {
    state.SkipWithError(("cannot open " + path.string()).c_str());
    return;
  }
  tandem::Result<Tokenizer> t = Tokenizer::FromGguf(*f);
  if (!t.ok()) {
    state.SkipWithError(t.status().ToString().c_str());
    return;
  }
  const std::string text = MakeText(1 << 20);
  std::vector<TokenId> ids;
  for (auto _ : state) {
    ids.clear();
    tandem::Status st = t->Encode(text, {.add_special = false, .parse_special = false}, &ids);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(ids.size());
}

BENCHMARK_CAPTURE(BM_Tokenize, llama_spm, std::string("ggml-vocab-llama-spm.gguf"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Tokenize, qwen2, std::string("gpt2-pre-qwen2.gguf"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Tokenize, llama_bpe, std::string("gpt2-pre-llama-bpe.gguf"))
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

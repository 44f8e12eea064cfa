// A synthetic SentencePiece-style vocabulary for random-weight models, so that every model
// tandem makes can be run end to end (tokenize, generate, detokenize) without downloads:
// <unk>, <s>, </s>, the 256 byte-fallback tokens, then made-up syllable words, half of them
// word-initial ("▁" prefix). Deterministic; every piece is unique.
//
// Thread safety: pure function.
#pragma once

#include <cstdint>

#include "gguf/writer.h"

namespace tandem::synth {

// Writes tokenizer.ggml.* metadata for a vocabulary of n_vocab >= 259 tokens.
void AddSyntheticVocab(gguf::GgufWriter& w, uint32_t n_vocab);

}  // namespace tandem::synth

// Sampling steps: the small pieces a Sampler chains to turn logits into the next token.
//
// Every step works in place on a Candidates array of (id, logit, p) and allocates nothing once
// the array has reached the vocabulary's size, so a sampler that is warm allocates nothing per
// token. Steps that cut candidates keep at least one. Each step is tested on its own.
//
// Thread safety: none; a Candidates array, a TokenHistory and an Rng belong to one sampler.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace tandem::sampling {

struct TokenCandidate {
  int32_t id;
  float logit;
  float p;  // probability; valid after Softmax()
};

struct Candidates {
  std::vector<TokenCandidate> data;
  bool sorted = false;  // data is in descending logit order

  // data[i] = {i, logits[i], 0}; reuses the capacity it has.
  void Reset(std::span<const float> logits);
};

// The last `capacity` accepted tokens and how often each occurs among them (a ring buffer).
class TokenHistory {
 public:
  explicit TokenHistory(size_t capacity = 0) : ring_(capacity) {}

  // REQUIRES: id >= 0.
  void Accept(int32_t id);
  void Clear();
  size_t size() const { return size_; }
  // Occurrences of `id` among the last capacity() tokens.
  int Count(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < counts_.size() ? counts_[id] : 0;
  }

 private:
  std::vector<int32_t> ring_;
  size_t next_ = 0;  // where the next token goes
  size_t size_ = 0;
  std::vector<int> counts_;  // by token id; grows to the largest id seen
};

// Deterministic for a given seed on every platform (mt19937_64 and a fixed bits-to-double map).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  // As if Uniform() had been called n times.
  void Skip(uint64_t n) { engine_.discard(n); }

 private:
  std::mt19937_64 engine_;
};

// Repetition penalty (positive logits divided by `repeat`, negative ones multiplied), then
// `frequency` times the count and `presence` once subtracted, for tokens in `history`.
void ApplyPenalties(const TokenHistory& history, float repeat, float frequency, float presence,
                    Candidates* c);

// Keeps the k highest logits, sorted. k <= 0 or k >= size keeps all (and sorts).
void TopK(int k, Candidates* c);

// Sorts by logit (if not sorted) and sets p to the softmax of the logits.
void Softmax(Candidates* c);

// Keeps the smallest prefix, by probability, whose probabilities sum to at least top_p
// (at least `min_keep`). top_p >= 1 keeps all.
void TopP(float top_p, size_t min_keep, Candidates* c);

// Keeps tokens whose probability is at least min_p times the largest one (at least `min_keep`).
// min_p <= 0 keeps all.
void MinP(float min_p, size_t min_keep, Candidates* c);

// Divides the logits by `temperature`. REQUIRES: temperature > 0.
void Temperature(float temperature, Candidates* c);

// The id with the highest logit (the first one on ties). REQUIRES: c is not empty.
int32_t Greedy(const Candidates& c);

// Draws an id from the softmax of the logits. REQUIRES: c is not empty.
int32_t Draw(Rng* rng, Candidates* c);

}  // namespace tandem::sampling

// Mixture-of-experts routing: which experts a token goes to, and with what weights.
//
// Qwen3-MoE (and Mixtral, and Qwen2-MoE without its shared expert) route a token by a softmax over
// the router's logits, keep the k most probable experts (a tie goes to the lower index), and, when
// the model says so, renormalise the k kept probabilities to sum to 1.
//
// Thread safety: a function of its arguments.
#pragma once

#include <cstdint>

namespace tandem::model {

// `logits` [n_expert] (overwritten with the softmax); writes the chosen experts, most probable
// first, to experts[k] and their weights to weights[k].
// REQUIRES: 1 <= k <= n_expert.
void SelectExperts(float* logits, int64_t n_expert, int64_t k, bool normalize, int32_t* experts, float* weights);

}  // namespace tandem::model

// Mixture-of-experts routing, one token per workgroup (model/moe.h's rule): the softmax of the
// router's logits (in place), the k most probable experts (a tie goes to the lower index), their
// probabilities as weights, renormalised to sum 1 when `normalize`.
#version 450
#include "common.glsl"

layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer L { float logits[]; };
layout(std430, binding = 1) writeonly buffer I { int ids[]; };
layout(std430, binding = 2) writeonly buffer W { float weights[]; };
layout(push_constant) uniform Push {
  uint n_expert;
  uint k;
  uint normalize;
} p;

#define MAX_K 16
void main() {
  const uint t = gl_WorkGroupID.x, base = t * p.n_expert;
  float mx = logits[base];
  for (uint e = 1; e < p.n_expert; ++e) mx = max(mx, logits[base + e]);
  float total = 0.0;
  for (uint e = 0; e < p.n_expert; ++e) {
    const float v = exp(logits[base + e] - mx);
    logits[base + e] = v;
    total += v;
  }
  for (uint e = 0; e < p.n_expert; ++e) logits[base + e] /= total;
  int chosen[MAX_K];
  float w[MAX_K];
  float sum = 0.0;
  for (uint j = 0; j < p.k; ++j) {
    int best = -1;
    for (uint e = 0; e < p.n_expert; ++e) {
      bool taken = false;
      for (uint i = 0; i < j; ++i) taken = taken || chosen[i] == int(e);
      if (taken) continue;
      if (best < 0 || logits[base + e] > logits[base + uint(best)]) best = int(e);
    }
    chosen[j] = best;
    w[j] = logits[base + uint(best)];
    sum += w[j];
  }
  for (uint j = 0; j < p.k; ++j) {
    ids[t * p.k + j] = chosen[j];
    weights[t * p.k + j] = p.normalize != 0 && sum > 0.0 ? w[j] / sum : w[j];
  }
}

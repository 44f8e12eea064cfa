// gate[i] = act(gate[i]) * up[i]: SiLU, or GELU's tanh approximation when `gelu` (written as
// x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), as the CPU path computes it).
// With -DROUND_Q8_0 or -DROUND_Q8_K (n a multiple of ROUND_BLOCK) an invocation takes a block,
// and also writes r = gate rounded as the next product takes it (round.glsl): what
// act_round.comp would make of gate, one dispatch fewer.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
#if defined(ROUND_Q8_0) || defined(ROUND_Q8_K)
#define ROUND
#include "round.glsl"
layout(std430, binding = 2) writeonly buffer R { float r[]; };
#endif
layout(push_constant) uniform Push {
  uint n;
  uint gelu;
} p;

float Act(float x) {
  float e;
  if (p.gelu != 0) {
    e = exp(-2.0 * 0.7978845608028654 * x * (1.0 + 0.044715 * x * x));
  } else {
    e = exp(-x);
  }
  return x / (1.0 + e);
}

void main() {
#if defined(ROUND)
  for (uint blk = gl_GlobalInvocationID.x; blk < p.n / ROUND_BLOCK; blk += GRID_STRIDE) {
    const uint o = blk * ROUND_BLOCK;
    float amax = 0.0;
    for (uint i = o; i < o + ROUND_BLOCK; ++i) {
      const float v = Act(g[i]) * u[i];
      g[i] = v;  // read back below by this invocation only
      amax = max(amax, abs(v));
    }
    float d, id;
    RoundScale(amax, d, id);
    for (uint i = o; i < o + ROUND_BLOCK; ++i) r[i] = RoundTo(g[i], d, id);
  }
#else
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += GRID_STRIDE) g[i] = Act(g[i]) * u[i];
#endif
}

// out[t] = sum over j < k of weight[t][j] * ye[t * k + j]: each token's experts' outputs (rows of
// `len`), weighted.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Y { float ye[]; };
layout(std430, binding = 1) readonly buffer W { float weights[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform Push {
  uint n;  // tokens * len
  uint len;
  uint k;
} p;

void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += GRID_STRIDE) {
    const uint t = i / p.len, e = i % p.len;
    float s = 0.0;
    for (uint j = 0; j < p.k; ++j) s += weights[t * p.k + j] * ye[(t * p.k + j) * p.len + e];
    o[i] = s;
  }
}

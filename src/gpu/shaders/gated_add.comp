// a[t][i] += sigmoid(g[t]) * b[t][i]: qwen2moe's shared expert (b) added to the routed experts'
// sum (a) with its gate (g, one logit per token).
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) readonly buffer G { float g[]; };
layout(push_constant) uniform Push {
  uint n;  // tokens * len
  uint len;
} p;

void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += GRID_STRIDE) {
    a[i] += b[i] / (1.0 + exp(-g[i / p.len]));
  }
}

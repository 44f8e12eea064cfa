// Rotates every head of every token by its position's angles: cs holds, per token, cos[half]
// then sin[half] (computed on the host, as the CPU path computes them). Pairs are
// (i, i + half) with `halves` (NeoX order), else (2i, 2i + 1). Group x: token, y: head.
#version 450
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer CS { float cs[]; };
layout(push_constant) uniform Push {
  uint head_dim;
  uint stride;  // floats per token
  uint halves;
} p;

void main() {
  const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y, half_dim = p.head_dim / 2;
  const uint row = t * p.stride + h * p.head_dim;
  for (uint i = gl_LocalInvocationID.x; i < half_dim; i += 64) {
    const uint i0 = p.halves != 0 ? i : 2 * i, i1 = p.halves != 0 ? i + half_dim : 2 * i + 1;
    const float c = cs[t * p.head_dim + i], s = cs[t * p.head_dim + half_dim + i];
    const float a = x[row + i0], b = x[row + i1];
    x[row + i0] = a * c - b * s;
    x[row + i1] = a * s + b * c;
  }
}

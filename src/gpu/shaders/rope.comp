// Rotates every head of every token's queries and keys by its position's angles: cs holds, per
// token, cos[half] then sin[half] (computed on the host, as the CPU path computes them). Pairs
// are (i, i + half) with `halves` (NeoX order), else (2i, 2i + 1). Group x: token; y: head, the
// queries' q_heads first, then the keys'.
#version 450
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer CS { float cs[]; };
layout(std430, binding = 2) buffer K { float k[]; };
layout(push_constant) uniform Push {
  uint head_dim;
  uint q_stride;  // floats per token
  uint k_stride;
  uint halves;
  uint q_heads;
} p;

void main() {
  const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y, half_dim = p.head_dim / 2;
  const bool is_q = h < p.q_heads;
  const uint row = is_q ? t * p.q_stride + h * p.head_dim : t * p.k_stride + (h - p.q_heads) * p.head_dim;
  for (uint i = gl_LocalInvocationID.x; i < half_dim; i += 64) {
    const uint i0 = p.halves != 0 ? i : 2 * i, i1 = p.halves != 0 ? i + half_dim : 2 * i + 1;
    const float c = cs[t * p.head_dim + i], s = cs[t * p.head_dim + half_dim + i];
    if (is_q) {
      const float a = q[row + i0], b = q[row + i1];
      q[row + i0] = a * c - b * s;
      q[row + i1] = a * s + b * c;
    } else {
      const float a = k[row + i0], b = k[row + i1];
      k[row + i0] = a * c - b * s;
      k[row + i1] = a * s + b * c;
    }
  }
}

// Rotates every head of every token's queries and keys by its position's angles, and stores each
// token's keys (rotated) and values into its cache cell: one dispatch where a rotation and a
// store were two. cs holds, per token, cos[half] then sin[half] (computed on the host, as the CPU
// path computes them); pairs are (i, i + half) with `halves` (NeoX order), else (2i, 2i + 1).
// Cache rows are F16, or Q8_0 with -DK_Q8_0 / -DV_Q8_0 (blocks of 32 rounded as round.glsl's
// Q8_0: d stored as F16, q = round(x / d), as the CPU's cache does; a key head is whole blocks,
// as CheckKvCacheTypes allows a Q8_0 cache only for head sizes that are multiples of 32).
// Group x: token; y: a query head (rotated in place), then a key head (rotated into shared
// memory, then stored), then last the token's value row (stored).
#version 450
#include "common.glsl"
#include "round.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer CS { float cs[]; };
layout(std430, binding = 2) readonly buffer SK { float src_k[]; };
layout(std430, binding = 3) readonly buffer C { int cells[]; };
layout(std430, binding = 4) writeonly buffer DK { uint8_t dst_k[]; };
layout(std430, binding = 5) readonly buffer SV { float src_v[]; };
layout(std430, binding = 6) writeonly buffer DV { uint8_t dst_v[]; };
layout(push_constant) uniform Push {
  uint head_dim;
  uint q_stride;  // floats per token of the queries
  uint kv_dim;    // floats per token of the keys and of the values
  uint halves;
  uint q_heads;
  uint kv_heads;
  uint k_row_bytes;
  uint v_row_bytes;
} p;

#define MAX_DIM 256
shared float rot[MAX_DIM];  // a key head, rotated

void Put8(bool v, uint o, uint b) {
  if (v) {
    dst_v[o] = uint8_t(b);
  } else {
    dst_k[o] = uint8_t(b);
  }
}
void Put16(bool v, uint o, float x) {
  const uint h = packHalf2x16(vec2(x, 0.0));
  Put8(v, o, h & 255);
  Put8(v, o + 1, h >> 8);
}
// Element i of what is stored: the rotated key head, or the token's value row.
float Val(bool v, uint in_row, uint i) { return v ? src_v[in_row + i] : rot[i]; }

// Stores n elements (Val) at elements e0.. of token t's cache row of K or V (v).
void Store(bool v, uint t, uint e0, uint n) {
  const uint row = uint(cells[t]) * (v ? p.v_row_bytes : p.k_row_bytes), in_row = t * p.kv_dim;
#if defined(K_Q8_0) && defined(V_Q8_0)
  const bool q8 = true;
#elif defined(K_Q8_0)
  const bool q8 = !v;
#elif defined(V_Q8_0)
  const bool q8 = v;
#else
  const bool q8 = false;
#endif
  if (q8) {
    for (uint blk = gl_LocalInvocationID.x; blk < n / 32; blk += 64) {
      float amax = 0.0;
      for (uint i = 0; i < 32; ++i) amax = max(amax, abs(Val(v, in_row, 32 * blk + i)));
      float d, id;
      RoundScale(amax, d, id);
      const uint o = row + 34 * (e0 / 32 + blk);
      Put16(v, o, d);
      for (uint i = 0; i < 32; ++i) {
        const int qi = clamp(int(roundEven(Val(v, in_row, 32 * blk + i) * id)), -127, 127);
        Put8(v, o + 2 + i, uint(qi) & 255);
      }
    }
  } else {
    for (uint i = gl_LocalInvocationID.x; i < n; i += 64) Put16(v, row + 2 * (e0 + i), Val(v, in_row, i));
  }
}

void main() {
  const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y, half_dim = p.head_dim / 2;
  if (h == p.q_heads + p.kv_heads) {
    Store(true, t, 0, p.kv_dim);
    return;
  }
  const bool is_q = h < p.q_heads;  // the same for the whole workgroup
  const uint kh = h - p.q_heads;
  const uint row = is_q ? t * p.q_stride + h * p.head_dim : t * p.kv_dim + kh * p.head_dim;
  for (uint i = gl_LocalInvocationID.x; i < half_dim; i += 64) {
    const uint i0 = p.halves != 0 ? i : 2 * i, i1 = p.halves != 0 ? i + half_dim : 2 * i + 1;
    const float c = cs[t * p.head_dim + i], s = cs[t * p.head_dim + half_dim + i];
    if (is_q) {
      const float a = q[row + i0], b = q[row + i1];
      q[row + i0] = a * c - b * s;
      q[row + i1] = a * s + b * c;
    } else {
      const float a = src_k[row + i0], b = src_k[row + i1];
      rot[i0] = a * c - b * s;
      rot[i1] = a * s + b * c;
    }
  }
  if (is_q) return;
  barrier();
  Store(false, t, kh * p.head_dim, p.head_dim);
}

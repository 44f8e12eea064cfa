// Writes each token's K or V row into its cache cell: F16, or Q8_0 with -DCACHE_Q8_0 (blocks of
// 32: d = amax / 127 stored as F16, q = round(x / d), as the CPU's cache does). Group x: token.
#version 450
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer S { float src[]; };
layout(std430, binding = 1) readonly buffer C { int cells[]; };
layout(std430, binding = 2) writeonly buffer D { uint8_t dst[]; };
layout(push_constant) uniform Push {
  uint kv_dim;
  uint row_bytes;
} p;

void Put16(uint o, float v) {
  const uint h = packHalf2x16(vec2(v, 0.0));
  dst[o] = uint8_t(h & 255);
  dst[o + 1] = uint8_t(h >> 8);
}

void main() {
  const uint t = gl_WorkGroupID.x;
  const uint row = uint(cells[t]) * p.row_bytes, in_row = t * p.kv_dim;
#if defined(CACHE_Q8_0)
  for (uint blk = gl_LocalInvocationID.x; blk < p.kv_dim / 32; blk += 64) {
    float amax = 0.0;
    for (uint i = 0; i < 32; ++i) amax = max(amax, abs(src[in_row + 32 * blk + i]));
    const uint o = row + 34 * blk;
    Put16(o, amax / 127.0);
    const float d = unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    for (uint i = 0; i < 32; ++i) {
      const int q = clamp(int(roundEven(src[in_row + 32 * blk + i] * id)), -127, 127);
      dst[o + 2 + i] = uint8_t(uint(q) & 255);
    }
  }
#else
  for (uint i = gl_LocalInvocationID.x; i < p.kv_dim; i += 64) Put16(row + 2 * i, src[in_row + i]);
#endif
}

// Writes each token's K and V rows into its cache cell, each as F16, or Q8_0 with -DK_Q8_0 /
// -DV_Q8_0 (blocks of 32: d = amax / 127 stored as F16, q = round(x / d), as the CPU's cache
// does). Group x: token; y: 0 the K row, 1 the V row.
#version 450
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer SK { float src_k[]; };
layout(std430, binding = 1) readonly buffer C { int cells[]; };
layout(std430, binding = 2) writeonly buffer DK { uint8_t dst_k[]; };
layout(std430, binding = 3) readonly buffer SV { float src_v[]; };
layout(std430, binding = 4) writeonly buffer DV { uint8_t dst_v[]; };
layout(push_constant) uniform Push {
  uint kv_dim;
  uint k_row_bytes;
  uint v_row_bytes;
} p;

float Src(bool v, uint i) { return v ? src_v[i] : src_k[i]; }
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

void main() {
  const uint t = gl_WorkGroupID.x;
  const bool v = gl_WorkGroupID.y == 1;
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
    for (uint blk = gl_LocalInvocationID.x; blk < p.kv_dim / 32; blk += 64) {
      float amax = 0.0;
      for (uint i = 0; i < 32; ++i) amax = max(amax, abs(Src(v, in_row + 32 * blk + i)));
      const uint o = row + 34 * blk;
      Put16(v, o, amax / 127.0);
      const float d = unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
      const float id = d != 0.0 ? 1.0 / d : 0.0;
      for (uint i = 0; i < 32; ++i) {
        const int q = clamp(int(roundEven(Src(v, in_row + 32 * blk + i) * id)), -127, 127);
        Put8(v, o + 2 + i, uint(q) & 255);
      }
    }
  } else {
    for (uint i = gl_LocalInvocationID.x; i < p.kv_dim; i += 64) Put16(v, row + 2 * i, Src(v, in_row + i));
  }
}

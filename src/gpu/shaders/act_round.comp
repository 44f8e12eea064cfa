// Rounds activations as the CPU's products quantize them before their integer dot products (and
// as llama.cpp does), so the GPU's products see the same values: per block of 32 (Q8_0: scale
// d = amax / 127 stored as F16) or 256 (-DBLOCK_Q8_K: d = amax / 127 as F32), x becomes
// d * clamp(round_half_even(x / d), -127, 127). One invocation per block, grid-stride.
#version 450
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer S { float src[]; };
layout(std430, binding = 1) writeonly buffer D { float dst[]; };
layout(push_constant) uniform Push {
  uint blocks;
} p;

#if defined(BLOCK_Q8_K)
#define BLOCK 256
#else
#define BLOCK 32
#endif

void main() {
  for (uint blk = gl_GlobalInvocationID.x; blk < p.blocks; blk += GRID_STRIDE) {
    const uint o = blk * BLOCK;
    float amax = 0.0;
    for (uint i = 0; i < BLOCK; ++i) amax = max(amax, abs(src[o + i]));
#if defined(BLOCK_Q8_K)
    const float d = amax / 127.0;
    const float id = amax > 0.0 ? 127.0 / amax : 0.0;
#else
    const float d = unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
#endif
    for (uint i = 0; i < BLOCK; ++i) dst[o + i] = d * clamp(roundEven(src[o + i] * id), -127.0, 127.0);
  }
}

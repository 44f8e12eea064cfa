// Rounds activations as the CPU's products quantize them (round.glsl: blocks of 32, or 256 with
// -DROUND_Q8_K), so the GPU's products see the same values. One invocation per block, grid-stride.
#version 450
#include "common.glsl"
#include "round.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer S { float src[]; };
layout(std430, binding = 1) writeonly buffer D { float dst[]; };
layout(push_constant) uniform Push {
  uint blocks;
} p;

void main() {
  for (uint blk = gl_GlobalInvocationID.x; blk < p.blocks; blk += GRID_STRIDE) {
    const uint o = blk * ROUND_BLOCK;
    float amax = 0.0;
    for (uint i = 0; i < ROUND_BLOCK; ++i) amax = max(amax, abs(src[o + i]));
    float d, id;
    RoundScale(amax, d, id);
    for (uint i = 0; i < ROUND_BLOCK; ++i) dst[o + i] = RoundTo(src[o + i], d, id);
  }
}

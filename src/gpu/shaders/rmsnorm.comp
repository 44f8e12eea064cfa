// y[row] = x[row] / sqrt(mean(x[row]^2) + eps) * w, one workgroup per row (group x, from row0). In place
// when x and y are the same buffer: each thread writes only the elements it read, after the
// barrier that ends the reading of the sum.
// With -DROUND_Q8_0 or -DROUND_Q8_K it also writes r[row] = y[row] rounded as the next products
// take it (round.glsl; len a multiple of ROUND_BLOCK): what act_round.comp would make of y, one
// dispatch fewer.
#version 450
#include "common.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
#if defined(ROUND_Q8_0) || defined(ROUND_Q8_K)
#define ROUND
#include "round.glsl"
layout(std430, binding = 3) writeonly buffer R { float r[]; };
#endif
layout(push_constant) uniform Push {
  uint len;
  uint x_stride;
  uint y_stride;
  float eps;
  uint row0;  // first row of this dispatch
} p;

shared float red[64];

void main() {
  const uint row = p.row0 + gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  float ss = 0.0;
  for (uint i = tid; i < p.len; i += 64) {
    const float v = x[row * p.x_stride + i];
    ss += v * v;
  }
  // Summed within each subgroup, then across the subgroups (one barrier).
  ss = subgroupAdd(ss);
  if (subgroupElect()) red[gl_SubgroupID] = ss;
  barrier();
  float total = 0.0;
  for (uint i = 0; i < gl_NumSubgroups; ++i) total += red[i];
  const float inv = 1.0 / sqrt(total / float(p.len) + p.eps);
#if defined(ROUND)
  // A block at a time per thread: its largest output, then the outputs and their rounding.
  const uint xo = row * p.x_stride, yo = row * p.y_stride;
  for (uint o = tid * ROUND_BLOCK; o < p.len; o += 64 * ROUND_BLOCK) {
    float amax = 0.0;
    for (uint i = o; i < o + ROUND_BLOCK; ++i) amax = max(amax, abs(x[xo + i] * inv * w[i]));
    float d, id;
    RoundScale(amax, d, id);
    for (uint i = o; i < o + ROUND_BLOCK; ++i) {
      const float v = x[xo + i] * inv * w[i];
      y[yo + i] = v;
      r[yo + i] = RoundTo(v, d, id);
    }
  }
#else
  for (uint i = tid; i < p.len; i += 64) y[row * p.y_stride + i] = x[row * p.x_stride + i] * inv * w[i];
#endif
}

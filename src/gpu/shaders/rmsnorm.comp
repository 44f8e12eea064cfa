// y[row] = x[row] / sqrt(mean(x[row]^2) + eps) * w, one workgroup per row (group x, from row0). In place
// when x and y are the same buffer: each thread writes only the elements it read.
#version 450
#include "common.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
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
  for (uint i = tid; i < p.len; i += 64) y[row * p.y_stride + i] = x[row * p.x_stride + i] * inv * w[i];
}

// dst row i = src row idx[i] (rows of `len` floats). Group x: i.
#version 450
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer S { float src[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer D { float dst[]; };
layout(push_constant) uniform Push {
  uint len;
} p;

void main() {
  const uint i = gl_WorkGroupID.x, from = uint(idx[i]) * p.len;
  for (uint e = gl_LocalInvocationID.x; e < p.len; e += 64) dst[i * p.len + e] = src[from + e];
}

// a[i] += b[i % b_len]: the residual (b_len = n) or a bias on every row (b_len = row length).
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(push_constant) uniform Push {
  uint n;
  uint b_len;
} p;

void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += GRID_STRIDE) a[i] += b[i % p.b_len];
}

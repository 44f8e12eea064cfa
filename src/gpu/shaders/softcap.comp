// x = cap * tanh(x / cap) (Gemma's final logit soft-capping).
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(push_constant) uniform Push {
  uint n;
  float cap;
} p;

void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += GRID_STRIDE) x[i] = p.cap * tanh(x[i] / p.cap);
}

// gate[i] = act(gate[i]) * up[i]: SiLU, or GELU's tanh approximation when `gelu` (written as
// x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), as the CPU path computes it).
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(push_constant) uniform Push {
  uint n;
  uint gelu;
} p;

void main() {
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += GRID_STRIDE) {
    const float x = g[i];
    float e;
    if (p.gelu != 0) {
      e = exp(-2.0 * 0.7978845608028654 * x * (1.0 + 0.044715 * x * x));
    } else {
      e = exp(-x);
    }
    g[i] = x / (1.0 + e) * u[i];
  }
}

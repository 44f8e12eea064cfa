// Reads a buffer once, as 16-byte vectors, each invocation summing its share into one float (so
// the reads cannot be dropped): the device's read bandwidth (gpu::MeasureReadBandwidth).
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { vec4 s[]; };
layout(std430, binding = 1) writeonly buffer D { float d[]; };
layout(push_constant) uniform Push {
  uint n;  // vectors
} p;

void main() {
  vec4 acc = vec4(0.0);
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += GRID_STRIDE) acc += s[i];
  d[gl_GlobalInvocationID.x] = acc.x + acc.y + acc.z + acc.w;
}

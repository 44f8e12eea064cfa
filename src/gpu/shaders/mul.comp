// y[t][y_offset + row] = dot(row `row_base + row` of W, x[t]) for up to 8 tokens t per workgroup:
// one workgroup per row (group x) and per 8 tokens (group y). W's type is chosen at build time
// (-DTYPE_...); each thread dequantizes 32-element chunks of the row and dots them with every
// token's activations, then the workgroup sums its threads' parts.
// With -DMUL_ID (mixture of experts) W holds experts [expert_first, expert_first + experts) of
// `expert_rows` rows each, and each (token, choice) pair v = group y takes the rows of its own
// expert ids[v]: y[v][row] = dot(row of expert ids[v], x[v / x_div]). Pairs whose expert is in
// another part of W are left alone.
#version 450
#include "common.glsl"

layout(local_size_x = 64) in;

#include "dequant.glsl"

layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
#if defined(MUL_ID)
layout(std430, binding = 3) readonly buffer I { int ids[]; };
#endif

#if defined(MUL_ID)
#define NT 1
#else
#define NT 8
#endif
shared float red[NT][64];

void main() {
  const uint row = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * NT, tid = gl_LocalInvocationID.x;
  const uint nt = min(NT, p.nt - t0);
#if defined(MUL_ID)
  const int e = ids[t0] - int(p.expert_first);
  if (e < 0 || e >= int(p.experts)) return;  // the whole workgroup: before any barrier
  const uint w_row = uint(e) * p.expert_rows + p.row_base + row;
  const uint x_row = t0 / p.x_div;
#else
  const uint w_row = p.row_base + row;
#endif
  const uint base = RowBase(w_row);
  float acc[NT];
  for (uint t = 0; t < NT; ++t) acc[t] = 0.0;
  const uint chunks = (p.cols + 31) / 32;
  for (uint c = tid; c < chunks; c += 64) {
    float v[32];
    Chunk(base, c, v);
    for (uint t = 0; t < nt; ++t) {
#if defined(MUL_ID)
      const uint xo = x_row * p.x_stride + 32 * c;
#else
      const uint xo = (t0 + t) * p.x_stride + 32 * c;
#endif
      float s = 0.0;
      for (uint i = 0; i < 32; ++i) s += 32 * c + i < p.cols ? v[i] * x[xo + i] : 0.0;
      acc[t] += s;
    }
  }
  for (uint t = 0; t < NT; ++t) red[t][tid] = acc[t];
  barrier();
  for (uint s = 32; s > 0; s >>= 1) {
    if (tid < s) {
      for (uint t = 0; t < NT; ++t) red[t][tid] += red[t][tid + s];
    }
    barrier();
  }
  if (tid < nt) y[(t0 + tid) * p.y_stride + p.y_offset + p.row_base + row] = red[tid][0];
}

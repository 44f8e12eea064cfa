// y[t][y_offset + row] = dot(row `row_base + row` of W, x[t]) for up to 8 tokens t per workgroup:
// one workgroup per row (group x) and per 8 tokens (group y). W's type is chosen at build time
// (-DTYPE_...); the workgroup's threads take the row's blocks LANES threads to a block, each
// dequantizing its part (parts.glsl) once and dotting it with every token's activations; the
// parts' sums are added within each subgroup (subgroupAdd), then across subgroups.
// With -DMUL_ID (mixture of experts) W holds experts [expert_first, expert_first + experts) of
// `expert_rows` rows each, and each (token, choice) pair v = group y takes the rows of its own
// expert ids[v]: y[v][row] = dot(row of expert ids[v], x[v / x_div]). Pairs whose expert is in
// another part of W are left alone. With `accumulate` the sums are added to y (a residual). A
// stack of matrices (push split1) sends each row's products to its own output (Put, dequant.glsl).
#version 450
#include "common.glsl"
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 64) in;

#include "dequant.glsl"
#include "parts.glsl"

layout(std430, binding = 1) readonly buffer X { float x[]; };
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
  const uint lane = tid % LANES, blocks = (p.cols + BLOCK - 1) / BLOCK;
  for (uint blk = tid / LANES; blk < blocks; blk += 64 / LANES) {
    float v[RUNS * RUN];
    Part(base, blk, lane, v);
    for (uint t = 0; t < nt; ++t) {
#if defined(MUL_ID)
      const uint xo = x_row * p.x_stride + BLOCK * blk;
#else
      const uint xo = (t0 + t) * p.x_stride + BLOCK * blk;
#endif
      float s = 0.0;
      for (uint r = 0; r < RUNS; ++r) {
        const uint e = RunStart(lane, r);
        for (uint i = 0; i < RUN; ++i) {
          // Past the end only in a float row's last chunk, where Part gave zeros.
          s += BLOCK * blk + e + i < p.cols ? v[RUN * r + i] * x[xo + e + i] : 0.0;
        }
      }
      acc[t] += s;
    }
  }
  for (uint t = 0; t < NT; ++t) acc[t] = subgroupAdd(acc[t]);
  if (subgroupElect()) {
    for (uint t = 0; t < NT; ++t) red[t][gl_SubgroupID] = acc[t];
  }
  barrier();
  if (tid < nt) {
    float s = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; ++i) s += red[tid][i];
    Put(t0 + tid, p.row_base + row, s);
  }
}

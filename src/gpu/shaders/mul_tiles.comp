// y[t][y_offset + row_base + r] = dot(row row_base + r of W, x[t]) for every row r < rows and
// token t < nt, by tiles: a workgroup takes 64 rows (group x) by 64 tokens (group y). Per 32
// columns, its first 64 threads dequantize one row's chunk each (Chunk, dequant.glsl) into shared
// memory while the other 64 copy the tokens' activations there; then each thread adds the
// products of 8 rows by 4 tokens from shared memory. Each weight is dequantized once per 64
// tokens (mul.comp: once per 8) and every product reads shared memory. For prompts and batches:
// gpu::RecordMul takes it for more than gpu::kMulTokens tokens. With `accumulate` the sums are
// added to y (a residual).
#version 450
#include "common.glsl"

layout(local_size_x = 128) in;

#include "dequant.glsl"

layout(std430, binding = 1) readonly buffer X { float x[]; };

const uint kRows = 64, kTokens = 64;
// 16 KiB in all, the least any Vulkan device offers. ws[i][r]: element i of this chunk of row r;
// xs[i][t ^ i]: element i of token t's, its index swizzled so that the copy, which writes a
// column of xs, meets no bank conflicts.
shared float ws[32][kRows];
shared float xs[32][kTokens];

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint r0 = gl_WorkGroupID.x * kRows, t0 = gl_WorkGroupID.y * kTokens;
  const uint tr = tid / 16, tt = tid % 16;  // this thread's rows 8 tr .. 8 tr + 7, tokens 4 tt .. 4 tt + 3
  float acc[8][4];
  for (uint u = 0; u < 8; ++u) {
    for (uint j = 0; j < 4; ++j) acc[u][j] = 0.0;
  }
  const bool dequantizes = tid < kRows, row_ok = dequantizes && r0 + tid < p.rows;
  const uint base = row_ok ? RowBase(p.row_base + r0 + tid) : 0;
  const uint chunks = (p.cols + 31) / 32;
  for (uint c = 0; c < chunks; ++c) {
    if (dequantizes) {
      float v[32];
      if (row_ok) {
        Chunk(base, c, v);
      } else {
        for (uint i = 0; i < 32; ++i) v[i] = 0.0;
      }
      for (uint i = 0; i < 32; ++i) ws[i][tid] = v[i];
    } else {
      // 64 tokens by 32 columns: consecutive threads read consecutive columns of one token.
      for (uint k = tid - kRows; k < 32 * kTokens; k += 128 - kRows) {
        const uint t = k / 32, i = k % 32, col = 32 * c + i;
        xs[i][t ^ i] = t0 + t < p.nt && col < p.cols ? x[(t0 + t) * p.x_stride + col] : 0.0;
      }
    }
    barrier();
    for (uint i = 0; i < 32; ++i) {
      float a[8], b[4];
      for (uint u = 0; u < 8; ++u) a[u] = ws[i][8 * tr + u];
      for (uint j = 0; j < 4; ++j) b[j] = xs[i][(4 * tt + j) ^ i];
      for (uint u = 0; u < 8; ++u) {
        for (uint j = 0; j < 4; ++j) acc[u][j] += a[u] * b[j];
      }
    }
    barrier();
  }
  for (uint u = 0; u < 8; ++u) {
    const uint r = r0 + 8 * tr + u;
    if (r >= p.rows) break;
    for (uint j = 0; j < 4; ++j) {
      const uint t = t0 + 4 * tt + j;
      if (t >= p.nt) continue;
      Put(t, p.row_base + r, acc[u][j]);
    }
  }
}

// Attention of one token's query head over the cache cells of its sequence (group x: token,
// y: head), flash style: blocks of 32 cells, each thread scoring one cell of the block against the
// query, then a running max and sum (the accumulator rescaled when the max grows), each thread
// owning head_dim / 32 output values. K and V are F16 or Q8_0 (-DK_Q8_0, -DV_Q8_0).
// tok[3t .. 3t+2]: where the token's sequence's cells start in `cells` (by position), the first
// of them a sliding-window layer attends to (its window's start), and how many
// (those at positions <= its own).
#version 450
#include "common.glsl"

layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint8_t kc[]; };
layout(std430, binding = 2) readonly buffer V { uint8_t vc[]; };
layout(std430, binding = 3) readonly buffer C { int cells[]; };
layout(std430, binding = 4) readonly buffer T { int tok[]; };
layout(std430, binding = 5) writeonly buffer O { float o[]; };
layout(push_constant) uniform Push {
  uint q_dim;
  uint head_dim;
  uint group;  // query heads per KV head
  uint k_row_bytes;
  uint v_row_bytes;
  float scale;
  uint windowed;  // a sliding-window layer: start at each token's window
} p;

#define MAX_DIM 256
shared float qv[MAX_DIM];
shared float score[32];
shared int cell_of[32];

float H16(uint o, bool is_k) {
  const uint lo = is_k ? uint(kc[o]) : uint(vc[o]), hi = is_k ? uint(kc[o + 1]) : uint(vc[o + 1]);
  return unpackHalf2x16(lo | (hi << 8)).x;
}
int S8(uint v) { return int(v) - int((v & 128) << 1); }

// Element `idx` of a row of K (is_k) or V starting at byte `row`.
float Element(uint row, uint idx, bool is_k) {
#if defined(K_Q8_0)
  const bool k_q8 = true;
#else
  const bool k_q8 = false;
#endif
#if defined(V_Q8_0)
  const bool v_q8 = true;
#else
  const bool v_q8 = false;
#endif
  if (is_k ? k_q8 : v_q8) {
    const uint b = row + 34 * (idx / 32);
    const uint raw = is_k ? uint(kc[b + 2 + idx % 32]) : uint(vc[b + 2 + idx % 32]);
    return H16(b, is_k) * float(S8(raw));
  }
  return H16(row + 2 * idx, is_k);
}

void main() {
  const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint D = p.head_dim, kv_head = h / p.group, qo = t * p.q_dim + h * D;
  for (uint d = tid; d < D; d += 32) qv[d] = q[qo + d] * p.scale;
  const int first = tok[3 * t], start = p.windowed != 0 ? tok[3 * t + 1] : 0, len = tok[3 * t + 2];
  float acc[MAX_DIM / 32];
  for (uint k = 0; k < MAX_DIM / 32; ++k) acc[k] = 0.0;
  float m = -1.0 / 0.0, l = 0.0;
  barrier();
  for (int j0 = start; j0 < len; j0 += 32) {
    const int j = j0 + int(tid);
    float s = -1.0 / 0.0;
    if (j < len) {
      const int cell = cells[first + j];
      cell_of[tid] = cell;
      const uint row = uint(cell) * p.k_row_bytes;
      s = 0.0;
      for (uint d = 0; d < D; ++d) s += qv[d] * Element(row, kv_head * D + d, true);
    }
    score[tid] = s;
    barrier();
    const int nb = min(32, len - j0);
    float mx = m;
    for (int i = 0; i < nb; ++i) mx = max(mx, score[i]);
    const float c = exp(m - mx);  // 0 on the first block (m = -inf)
    l *= c;
    for (uint k = 0; k < MAX_DIM / 32; ++k) acc[k] *= c;
    for (int i = 0; i < nb; ++i) {
      const float pi = exp(score[i] - mx);
      l += pi;
      const uint row = uint(cell_of[i]) * p.v_row_bytes;
      for (uint k = 0; k < MAX_DIM / 32; ++k) {
        const uint d = tid + 32 * k;
        if (d < D) acc[k] += pi * Element(row, kv_head * D + d, false);
      }
    }
    m = mx;
    barrier();
  }
  for (uint k = 0; k < MAX_DIM / 32; ++k) {
    const uint d = tid + 32 * k;
    if (d < D) o[qo + d] = l > 0.0 ? acc[k] / l : 0.0;
  }
}

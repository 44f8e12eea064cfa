// A row kernel's view of a weight row (mul.comp): blocks of BLOCK elements, LANES threads to a
// block, each thread taking RUNS runs of RUN consecutive elements. Part(base, blk, lane, v)
// dequantizes a thread's elements of block `blk` of the row at `base`, run after run;
// RunStart(lane, r) is where its run r starts within the block. The types a decode step reads
// most (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, F16, F32, BF16) are read by neighbouring threads in 2- or
// 4-byte words, so that the threads of a subgroup load neighbouring bytes together; the others
// take a 32-element chunk a thread (Chunk). Include after dequant.glsl.
#if defined(TYPE_Q4_0) || defined(TYPE_Q8_0) || defined(TYPE_Q6_K)
layout(std430, binding = 0) readonly buffer W16 { uint16_t wh[]; };  // the same buffer by 16-bit words
uint Word16x2(uint h) { return uint(wh[h]) | (uint(wh[h + 1]) << 16); }
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
layout(std430, binding = 0) readonly buffer W32 { uint ww[]; };  // the same buffer by 32-bit words
#endif

// Blocks of 32 read 4 threads to a block, 8 consecutive elements each: the float types and Q8_0.
#if defined(TYPE_F32) || defined(TYPE_F16) || defined(TYPE_BF16) || defined(TYPE_Q8_0)
#define BLOCK 32
#define LANES 4
#define RUNS 1
#define RUN 8
uint RunStart(uint lane, uint r) { return 8 * lane; }
#endif

#if defined(TYPE_F32) || defined(TYPE_F16) || defined(TYPE_BF16)
void Part(uint base, uint blk, uint lane, out float v[8]) {
  const uint e0 = 32 * blk + 8 * lane;
  for (uint i = 0; i < 8; ++i) {
    if (e0 + i >= p.cols) {
      v[i] = 0.0;
      continue;
    }
#if defined(TYPE_F32)
    v[i] = wf[base + e0 + i];
#elif defined(TYPE_F16)
    v[i] = unpackHalf2x16(uint(w16[base + e0 + i])).x;
#else
    v[i] = uintBitsToFloat(uint(w16[base + e0 + i]) << 16);
#endif
  }
}

#elif defined(TYPE_Q4_0)
// 18 bytes: d, qs[16] (element j: low nibble of qs[j], element j + 16: its high nibble). A lane
// takes qs[4 lane .. 4 lane + 3]: elements 4 lane.. and 16 + 4 lane...
#define BLOCK 32
#define LANES 4
#define RUNS 2
#define RUN 4
uint RunStart(uint lane, uint r) { return 16 * r + 4 * lane; }
void Part(uint base, uint blk, uint lane, out float v[8]) {
  const uint h = (base + 18 * blk) / 2;
  const float d = unpackHalf2x16(uint(wh[h])).x;
  const uint q = Word16x2(h + 1 + 2 * lane);
  for (uint i = 0; i < 4; ++i) {
    v[i] = d * (float((q >> (8 * i)) & 15) - 8.0);
    v[4 + i] = d * (float((q >> (8 * i + 4)) & 15) - 8.0);
  }
}

#elif defined(TYPE_Q8_0)
// 34 bytes: d, qs[32] (int8). A lane takes 8 of them.
void Part(uint base, uint blk, uint lane, out float v[8]) {
  const uint h = (base + 34 * blk) / 2;
  const float d = unpackHalf2x16(uint(wh[h])).x;
  const uint q0 = Word16x2(h + 1 + 4 * lane), q1 = Word16x2(h + 3 + 4 * lane);
  for (uint i = 0; i < 4; ++i) {
    v[i] = d * float(int(q0 << (24 - 8 * i)) >> 24);
    v[4 + i] = d * float(int(q1 << (24 - 8 * i)) >> 24);
  }
}

#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
// Q4_K, 144 bytes: d, dmin, scales[12] (6-bit scale and min of each 32-element sub-block,
// packed), qs[128]: sub-blocks 2k and 2k + 1 are the low and high nibbles of qs[32k .. 32k + 31].
// Q5_K, 176 bytes: the same with qh[32] before qs, bit j of qh[i] the fifth bit of element i of
// sub-block j. Lane l = 4k + m takes qs[32k + 8m .. + 7]: elements 8m.. of sub-blocks 2k and 2k + 1.
#define BLOCK 256
#define LANES 16
#define RUNS 2
#define RUN 8
uint RunStart(uint lane, uint r) { return 64 * (lane / 4) + 32 * r + 8 * (lane % 4); }
// Byte i of the scales, from their three words.
uint ScaleByte(uvec3 s, uint i) { return (s[i / 4] >> (8 * (i % 4))) & 255; }
void Part(uint base, uint blk, uint lane, out float v[16]) {
#if defined(TYPE_Q4_K)
  const uint w = (base + 144 * blk) / 4, qs = w + 4;
#else
  const uint w = (base + 176 * blk) / 4, qs = w + 12;
#endif
  const vec2 dm = unpackHalf2x16(ww[w]);
  const uvec3 s = uvec3(ww[w + 1], ww[w + 2], ww[w + 3]);
  const uint k = lane / 4, m = lane % 4;
  float ds[2], dmn[2];
  for (uint r = 0; r < 2; ++r) {
    const uint j = 2 * k + r;
    uint sc, mn;
    if (j < 4) {
      sc = ScaleByte(s, j) & 63;
      mn = ScaleByte(s, j + 4) & 63;
    } else {
      sc = (ScaleByte(s, j + 4) & 15) | ((ScaleByte(s, j - 4) >> 6) << 4);
      mn = (ScaleByte(s, j + 4) >> 4) | ((ScaleByte(s, j) >> 6) << 4);
    }
    ds[r] = dm.x * float(sc);
    dmn[r] = dm.y * float(mn);
  }
  const uvec2 q = uvec2(ww[qs + 8 * k + 2 * m], ww[qs + 8 * k + 2 * m + 1]);
#if defined(TYPE_Q5_K)
  const uvec2 qh = uvec2(ww[w + 4 + 2 * m], ww[w + 5 + 2 * m]);
#endif
  for (uint i = 0; i < 8; ++i) {
    const uint byte = (q[i / 4] >> (8 * (i % 4))) & 255;
    uint lo = byte & 15, hi = byte >> 4;
#if defined(TYPE_Q5_K)
    const uint h = (qh[i / 4] >> (8 * (i % 4))) & 255;
    lo |= ((h >> (2 * k)) & 1) << 4;
    hi |= ((h >> (2 * k + 1)) & 1) << 4;
#endif
    v[i] = ds[0] * float(lo) - dmn[0];
    v[8 + i] = ds[1] * float(hi) - dmn[1];
  }
}

#elif defined(TYPE_Q6_K)
// 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8, one per 16 elements),
// d. Element 128n + 32q + i (i < 32): its low bits the low (q < 2) or high nibble of ql[64n + 32
// (q % 2) + i], its high bits bits 2q.. of qh[32n + i]. Lane l = 8n + g takes i = 4g .. 4g + 3 of
// each q.
#define BLOCK 256
#define LANES 16
#define RUNS 4
#define RUN 4
uint RunStart(uint lane, uint r) { return 128 * (lane / 8) + 32 * r + 4 * (lane % 8); }
void Part(uint base, uint blk, uint lane, out float v[16]) {
  const uint b = base + 210 * blk, h = b / 2;
  const uint n = lane / 8, g = lane % 8;
  const float d = unpackHalf2x16(uint(wh[h + 104])).x;
  const uvec2 ql = uvec2(Word16x2(h + 32 * n + 2 * g), Word16x2(h + 32 * n + 16 + 2 * g));
  const uint qh = Word16x2(h + 64 + 16 * n + 2 * g);
  for (uint q = 0; q < 4; ++q) {
    const float ds = d * float(s8(b + 192 + 8 * n + 2 * q + g / 4));
    for (uint i = 0; i < 4; ++i) {
      const uint low4 = (ql[q % 2] >> (8 * i + 4 * (q / 2))) & 15;
      const uint high2 = (qh >> (8 * i + 2 * q)) & 3;
      v[4 * q + i] = ds * (float(low4 | (high2 << 4)) - 32.0);
    }
  }
}

#else
// The other types: a 32-element chunk a thread.
#define BLOCK 32
#define LANES 1
#define RUNS 1
#define RUN 32
uint RunStart(uint lane, uint r) { return 0; }
void Part(uint base, uint blk, uint lane, out float v[32]) { Chunk(base, blk, v); }
#endif

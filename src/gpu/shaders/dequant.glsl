// Shared by the product shaders (mul.comp, mul_tiles.comp): the weight buffer W at binding 0, in
// the type chosen at build time (-DTYPE_...), the push constants (gpu::MulPush), the outputs
// (Put), and Chunk, which dequantizes 32 elements of a row. Include after common.glsl.
#if defined(TYPE_F32)
layout(std430, binding = 0) readonly buffer W { float wf[]; };
#elif defined(TYPE_F16) || defined(TYPE_BF16)
layout(std430, binding = 0) readonly buffer W { uint16_t w16[]; };
#else
layout(std430, binding = 0) readonly buffer W { uint8_t w8[]; };
#endif

layout(push_constant) uniform Push {
  uint row_base;   // first row of this dispatch, within the buffer
  uint cols;
  uint nt;         // tokens
  uint x_stride;   // floats between tokens' activations
  uint y_stride;   // floats between tokens' outputs
  uint y_offset;   // output index of the buffer's row 0
  uint row_bytes;  // bytes per row (quantized types)
  uint expert_rows;   // MUL_ID: rows per expert
  uint expert_first;  // MUL_ID: the first expert in W
  uint experts;       // MUL_ID: experts in W
  uint x_div;         // MUL_ID: pairs per activation row (k for gate and up, 1 for down)
  uint rows;          // mul_tiles: rows of this dispatch
  uint accumulate;    // 1: y += the product (a residual), else y = it
  uint split1;        // a stack of matrices (0: none): W's rows from split1 on go to y1,
  uint split2;        //   from split2 on to y2 (split2 = all rows: two matrices),
  uint split_stride;  //   split_stride floats between tokens' outputs in both
} p;

// The outputs: y, and with a stack y1 and y2 (the row kernels of one type for several matrices
// that take the same input, as queries, keys and values do: one dispatch for all of them).
layout(std430, binding = 2) buffer Y { float y[]; };
#if !defined(MUL_ID)
layout(std430, binding = 3) buffer Y1 { float y1[]; };
layout(std430, binding = 4) buffer Y2 { float y2[]; };
#endif

// Stores (with `accumulate`: adds) s, the product of token t and output row `row` (W's row but
// for the MUL_ID kernels, whose W holds several experts).
void Put(uint t, uint row, float s) {
#if !defined(MUL_ID)
  if (p.split1 != 0 && row >= p.split1) {
    if (row >= p.split2) {
      const uint o = t * p.split_stride + row - p.split2;
      y2[o] = p.accumulate != 0 ? y2[o] + s : s;
    } else {
      const uint o = t * p.split_stride + row - p.split1;
      y1[o] = p.accumulate != 0 ? y1[o] + s : s;
    }
    return;
  }
#endif
  const uint o = t * p.y_stride + p.y_offset + row;
  y[o] = p.accumulate != 0 ? y[o] + s : s;
}

#if !defined(TYPE_F32) && !defined(TYPE_F16) && !defined(TYPE_BF16)
uint b8(uint o) { return uint(w8[o]); }
float h16(uint o) { return unpackHalf2x16(b8(o) | (b8(o + 1) << 8)).x; }
int s8(uint o) { int v = int(b8(o)); return v - ((v & 128) << 1); }
#endif

// Where row `r` of W starts (bytes; elements for the float types).
uint RowBase(uint r) {
#if defined(TYPE_F32) || defined(TYPE_F16) || defined(TYPE_BF16)
  return r * p.cols;
#else
  return r * p.row_bytes;
#endif
}

// Elements 32c .. 32c+31 of the row at `base` (bytes; elements for the float types).
void Chunk(uint base, uint c, out float v[32]) {
#if defined(TYPE_F32)
  for (uint i = 0; i < 32; ++i) v[i] = 32 * c + i < p.cols ? wf[base + 32 * c + i] : 0.0;
#elif defined(TYPE_F16)
  for (uint i = 0; i < 32; ++i) v[i] = 32 * c + i < p.cols ? unpackHalf2x16(uint(w16[base + 32 * c + i])).x : 0.0;
#elif defined(TYPE_BF16)
  for (uint i = 0; i < 32; ++i) v[i] = 32 * c + i < p.cols ? uintBitsToFloat(uint(w16[base + 32 * c + i]) << 16) : 0.0;
#elif defined(TYPE_Q4_0)
  const uint b = base + 18 * c;
  const float d = h16(b);
  for (uint j = 0; j < 16; ++j) {
    const uint q = b8(b + 2 + j);
    v[j] = d * (float(q & 15) - 8.0);
    v[j + 16] = d * (float(q >> 4) - 8.0);
  }
#elif defined(TYPE_Q4_1)
  const uint b = base + 20 * c;
  const float d = h16(b), m = h16(b + 2);
  for (uint j = 0; j < 16; ++j) {
    const uint q = b8(b + 4 + j);
    v[j] = d * float(q & 15) + m;
    v[j + 16] = d * float(q >> 4) + m;
  }
#elif defined(TYPE_Q5_0)
  const uint b = base + 22 * c;
  const float d = h16(b);
  const uint qh = b8(b + 2) | (b8(b + 3) << 8) | (b8(b + 4) << 16) | (b8(b + 5) << 24);
  for (uint j = 0; j < 16; ++j) {
    const uint q = b8(b + 6 + j);
    v[j] = d * (float((q & 15) | (((qh >> j) & 1) << 4)) - 16.0);
    v[j + 16] = d * (float((q >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16.0);
  }
#elif defined(TYPE_Q5_1)
  const uint b = base + 24 * c;
  const float d = h16(b), m = h16(b + 2);
  const uint qh = b8(b + 4) | (b8(b + 5) << 8) | (b8(b + 6) << 16) | (b8(b + 7) << 24);
  for (uint j = 0; j < 16; ++j) {
    const uint q = b8(b + 8 + j);
    v[j] = d * float((q & 15) | (((qh >> j) & 1) << 4)) + m;
    v[j + 16] = d * float((q >> 4) | (((qh >> (j + 16)) & 1) << 4)) + m;
  }
#elif defined(TYPE_Q8_0)
  const uint b = base + 34 * c;
  const float d = h16(b);
  for (uint j = 0; j < 32; ++j) v[j] = d * float(s8(b + 2 + j));
#elif defined(TYPE_Q2_K)
  // 84 bytes: scales[16] (4-bit scale | 4-bit min), qs[64] (2 bits), d, dmin.
  const uint b = base + 84 * (c / 8), sub = c % 8;
  const float d = h16(b + 80), dmin = h16(b + 82);
  for (uint i = 0; i < 32; ++i) {
    const uint e = 32 * sub + i;
    const uint s = b8(b + e / 16);
    const uint q = (b8(b + 16 + 32 * (e / 128) + e % 32) >> (2 * ((e % 128) / 32))) & 3;
    v[i] = d * float((s & 15) * q) - dmin * float(s >> 4);
  }
#elif defined(TYPE_Q3_K)
  // 110 bytes: hmask[32], qs[64] (low 2 bits), scales[12] (signed 6-bit, packed), d.
  const uint b = base + 110 * (c / 8), sub = c % 8;
  const float d = h16(b + 108);
  for (uint i = 0; i < 32; ++i) {
    const uint e = 32 * sub + i, j = e / 16;
    const uint low4 = j < 8 ? (b8(b + 96 + j) & 15) : (b8(b + 96 + j - 8) >> 4);
    const uint high2 = (b8(b + 104 + j % 4) >> (2 * (j / 4))) & 3;
    const int sc = int(low4 | (high2 << 4)) - 32;
    const int low2 = int((b8(b + 32 + 32 * (e / 128) + e % 32) >> (2 * ((e % 128) / 32))) & 3);
    const int q = low2 - (((b8(b + e % 32) >> (e / 32)) & 1) != 0 ? 0 : 4);
    v[i] = d * float(sc * q);
  }
#elif defined(TYPE_Q4_K) || defined(TYPE_Q5_K)
  // Q4_K, 144 bytes: d, dmin, scales[12] (6-bit scale and min per 32, packed), qs[128].
  // Q5_K, 176 bytes: the same and qh[32] (the fifth bits) before qs.
#if defined(TYPE_Q4_K)
  const uint b = base + 144 * (c / 8), qs = b + 16;
#else
  const uint b = base + 176 * (c / 8), qs = b + 48;
#endif
  const uint j = c % 8;
  const float d = h16(b), dmin = h16(b + 2);
  uint sc, mn;
  if (j < 4) {
    sc = b8(b + 4 + j) & 63;
    mn = b8(b + 8 + j) & 63;
  } else {
    sc = (b8(b + 8 + j) & 15) | ((b8(b + j) >> 6) << 4);
    mn = (b8(b + 8 + j) >> 4) | ((b8(b + 4 + j) >> 6) << 4);
  }
  const float ds = d * float(sc), dm = dmin * float(mn);
  for (uint i = 0; i < 32; ++i) {
    const uint byte = b8(qs + 32 * (j / 2) + i);
    uint q = (j % 2) == 0 ? (byte & 15) : (byte >> 4);
#if defined(TYPE_Q5_K)
    q |= ((b8(b + 16 + i) >> j) & 1) << 4;
#endif
    v[i] = ds * float(q) - dm;
  }
#elif defined(TYPE_Q6_K)
  // 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d.
  const uint b = base + 210 * (c / 8), sub = c % 8;
  const float d = h16(b + 208);
  for (uint i = 0; i < 32; ++i) {
    const uint e = 32 * sub + i, n = e / 128, r = e % 128;
    const uint lo = b8(b + 64 * n + r % 64);
    const uint low4 = r < 64 ? (lo & 15) : (lo >> 4);
    const uint high2 = (b8(b + 128 + 32 * n + r % 32) >> (2 * (r / 32))) & 3;
    v[i] = d * float(s8(b + 192 + e / 16) * (int(low4 | (high2 << 4)) - 32));
  }
#else
#error "no TYPE_ defined"
#endif
}

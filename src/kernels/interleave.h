// Interleaved weights: Q4_0, Q5_0 and Q8_0 matrices rearranged, 16 rows at a time, for the matrix
// kernels of CPUs with 512-bit integer dot products (VPDPBUSD). A row-major kernel computes one
// weight row against several activation rows and pays, per 32-element block and activation row,
// a horizontal sum and its own scale; with 16 rows side by side, one instruction multiplies 4
// consecutive elements of 16 rows by the same 4 activations (broadcast) and leaves each row's
// sum in its own lane, so scales apply to 16 rows at once and nothing is summed across lanes.
//
// Layout: a group of 16 rows is stored block by block (block b: elements 32b..32b+31 of each
// row); a group's bytes equal its 16 rows' bytes in the file format, so sizes do not change.
//   Q4_0, 288 bytes per block: chunks c = 0..3 of 64 bytes, lane r (4 bytes) = row r's stored
//         bytes qs[4c..4c+3] (low nibbles: elements 4c..4c+3, high: 16+4c..16+4c+3, each q in
//         0..15 for the weight d * (q - 8)); then 16 f16 scales d, row order.
//   Q5_0, 352 bytes per block: the four nibble chunks as Q4_0; then 8 masks of 64 bits, mask m
//         holding bit 4r + j = the fifth bit of row r's element 4m + j (the weight d * (q - 16),
//         q = nibble + 16 * fifth bit in 0..31); then 16 f16 scales.
//   Q8_0, 544 bytes per block: chunks c = 0..7 of 64 bytes, lane r = row r's qs[4c..4c+3] + 128
//         (as unsigned bytes, for the weight d * q); then 16 f16 scales.
// With activations in the Q8S format (per block: f32 scale, the int32 sum of its quants, 32 int8
// quants), block b of row r contributes d_w * d_a * (sum of u * a - bias * sum(a)), with u the
// unsigned stored value (q for Q4_0 and Q5_0, q + 128 for Q8_0) and bias 8, 16 or 128.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/quant.h"

namespace tandem::kernels {

inline constexpr int kInterleaveRows = 16;

// The activation format of interleaved weights.
struct BlockQ8S {
  float d;      // the scale, rounded through f16 as Q8_0's
  int32_t sum;  // the sum of qs
  int8_t qs[quant::kQK];
};
static_assert(sizeof(BlockQ8S) == 40);

// Whether `t` has an interleaved layout (Q4_0, Q5_0, Q8_0).
bool HasInterleavedLayout(quant::TensorType t);
// Rearranges `rows` rows of `cols` elements (file layout, row-major) into the interleaved layout.
// REQUIRES: HasInterleavedLayout(t), rows % 16 == 0, cols % 32 == 0; dst holds the same bytes.
void Interleave(quant::TensorType t, const void* src, void* dst, int64_t rows, int64_t cols);
// Bytes of one interleaved block of 16 rows.
size_t InterleavedBlockBytes(quant::TensorType t);

// Reference operations (scalar; the SIMD kernels are tested against them).
void QuantizeQ8SReference(const float* src, void* dst, int64_t n);
// out[r * ldo + j] = row j of the group `w` (16 interleaved rows of n elements) . activation row
// r (Q8S, rows a_stride bytes apart), for r < na, j < 16.
void GemmInterleavedReference(quant::TensorType t, int64_t n, const void* w, const void* a, size_t a_stride,
                              int na, float* out, int64_t ldo);

}  // namespace tandem::kernels

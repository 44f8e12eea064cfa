// Interleaved weights: Q4_0, Q5_0, Q8_0, Q4_K and Q6_K matrices rearranged, 16 rows at a time, for the matrix
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
//   Q4_K, 2304 bytes per super-block of 256 elements (16 x 144): sub-blocks 2p and 2p + 1 (p = 0..3)
//         in 8 chunks of 64 bytes at 512p + 64c, lane r = row r's stored qs[32p + 4c .. +3] (low
//         nibbles: elements 4c..4c+3 of sub-block 2p, high: of sub-block 2p + 1); then the 6-bit
//         scales and mins of the 16 rows' 8 sub-blocks, transposed (sub-block major, row minor)
//         and packed in 192 bytes: at 2048 + 16q + r the low 4 bits of sc[q][r] (low nibble) and
//         sc[q + 4][r] (high), q = 0..3; at 2112 + 16q + r the same of the mins; at 2176 + 16q + r
//         the top 2 bits of sc[q][r], sc[q + 4][r], mn[q][r], mn[q + 4][r] (bits 0-1, 2-3, 4-5,
//         6-7); then the 16 rows' d (f16) at 2240 and dmin at 2272.
//         Its activations are Q8_K: super-block i of row r contributes, with S_j the integer dot
//         of sub-block j's nibbles and quants and B_j the sum of those quants (two bsums),
//         (d * y.d) * float(sum_j sc_j S_j) - (dmin * y.d) * float(sum_j mn_j B_j), each product
//         of floats rounded as a fused multiply-add rounds it.
//
//   Q6_K, 3360 bytes per super-block (16 x 210), elements e = 0..255 with the stored six-bit
//         value u (0..63, the weight d * sc[e / 16] * (u - 32)): the low 4 bits of elements 64p ..
//         64p + 63 (p = 0..3) in 8 chunks at 512p + 64c, lane r = row r's elements 64p + 4c .. +3
//         (low nibbles) and 64p + 32 + 4c .. +3 (high nibbles), as Q4_K's nibbles; then the top 2
//         bits in 4 chunks per p at 2048 + 256p + 64h, byte 4r + k holding those of the elements
//         of nibble chunk c = h (bits 0-1 low nibble, 4-5 high nibble) and c = h + 4 (bits 2-3
//         low, 6-7 high), element k of their lanes; then the int8 scales transposed: sc[j] of row
//         r at 3072 + 16j + r; then the 16 rows' d (f16) at 3328.
//         Its activations are Q8_K: super-block i of row r contributes (d * y.d) * float(sum_j
//         sc_j (S_j - 32 B_j)), S_j the integer dot of the 16 stored values of group j with their
//         quants and B_j their sum (bsums[j]), rounded as a fused multiply-add rounds it.
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

// Whether `t` has an interleaved layout (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K).
bool HasInterleavedLayout(quant::TensorType t);
// The activation format of interleaved `t`: Q8_K for Q4_K and Q6_K, else Q8S (reported as kQ8_0, whose
// blocks Q8S extends). A K-quant's activation row is its Q8_K blocks followed by, per super-block,
// the 8 sums of its 32-element sub-blocks' quants as int16 (bsums[2j] + bsums[2j + 1]: 16 bytes),
// which Q4_K's mins take two sub-blocks at a time (FinishActRow writes them).
quant::TensorType InterleavedActType(quant::TensorType t);
// Bytes of one activation row of `cols` elements for interleaved `t`.
size_t InterleavedActRowBytes(quant::TensorType t, int64_t cols);
// Completes an activation row of interleaved `t` whose blocks are quantized (the K-quants' 32-element
// sums after the blocks; nothing for the other types). REQUIRES: `row` holds InterleavedActRowBytes.
void FinishActRow(quant::TensorType t, void* row, int64_t cols);
// Rearranges `rows` rows of `cols` elements (file layout, row-major) into the interleaved layout.
// REQUIRES: HasInterleavedLayout(t), rows % 16 == 0, cols a multiple of t's block; dst holds the
// same bytes.
void Interleave(quant::TensorType t, const void* src, void* dst, int64_t rows, int64_t cols);
// Bytes of one interleaved block of 16 rows.
size_t InterleavedBlockBytes(quant::TensorType t);

// Reference operations (scalar; the SIMD kernels are tested against them).
void QuantizeQ8SReference(const float* src, void* dst, int64_t n);
// out[r * ldo + j] = row j of the group `w` (16 interleaved rows of n elements) . activation row
// r (InterleavedActType(t), rows a_stride bytes apart), for r < na, j < 16. For Q4_K the SIMD
// kernels give the same bits (the same integer sums and the same float operations).
void GemmInterleavedReference(quant::TensorType t, int64_t n, const void* w, const void* a, size_t a_stride,
                              int na, float* out, int64_t ldo);

}  // namespace tandem::kernels

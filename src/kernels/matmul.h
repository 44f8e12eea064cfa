// Matrix-vector (decode) and matrix-matrix (prompt) products of quantized weights with float
// activations, split over a ThreadPool.
//
// Weights W are `rows` rows of `cols` elements of type `wtype`, row-major as in GGUF (a GGUF
// tensor of shape [cols, rows]). Activations are quantized once to the type's activation format
// (into the caller's Scratch), then every output row is one dot product. MatMul tiles the work:
// each thread takes a band of weight rows and, for each row, runs the multi-row dot over groups
// of up to kMaxMultiRows tokens, so each weight block is loaded and unpacked once per group of
// tokens instead of once per token.
//
// Thread safety: one call at a time per ThreadPool and per Scratch.
// REQUIRES: cols is a multiple of wtype's block size; the table has a dot for wtype.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernels.h"

namespace tandem::kernels {

// Reusable buffers; grows to the largest request and then never allocates again.
struct Scratch {
  std::vector<uint8_t> act;
};

// y[r] = W[r] . x for r < rows.
void MatVec(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
            int64_t cols, const float* x, float* y, Scratch& scratch);

// Y[t][r] = W[r] . X[t] for t < n_tokens, r < rows. X is n_tokens x cols, Y is n_tokens x rows
// (row stride `y_stride` floats, >= rows).
void MatMul(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
            int64_t cols, const float* x, int64_t n_tokens, float* y, int64_t y_stride,
            Scratch& scratch);

// The quantizer of the activation rows of interleaved `wtype` (InterleavedActType: Q8_K's, or
// k.quantize_q8s for Q8S); the rows still need FinishActRow.
quant::QuantizeRowFn InterleavedActQuantizer(const KernelTable& k, TensorType wtype);

// MatMul for weights in the interleaved layout (kernels/interleave.h), n_tokens >= 1 (a decode step
// too: a row's result does not depend on n_tokens). REQUIRES: k.gemm_interleaved[wtype] and
// the quantizer of InterleavedActType(wtype) (Q8S: k.quantize_q8s) are set; rows % 16 == 0.
void MatMulInterleaved(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
                       int64_t cols, const float* x, int64_t n_tokens, float* y, int64_t y_stride, Scratch& scratch);

// One of several products of interleaved weights with the same activations (a layer's queries,
// keys and values; its gate and up): Y[t][r] = W[r] . X[t] into y (row stride y_stride).
struct GemmJob {
  TensorType wtype = TensorType::kF32;
  const void* w = nullptr;
  int64_t rows = 0;
  float* y = nullptr;
  int64_t y_stride = 0;
};

// MatMulInterleaved for every job, all `cols` wide and taking the same x: the activations
// quantized once where the jobs' formats agree (all K-quants; all of the other types), and the
// 16-row groups of all jobs split among the threads in one pass of the pool. The same results as
// one MatMulInterleaved per job. REQUIRES: each job as MatMulInterleaved requires.
void MatMulInterleavedSameInput(const KernelTable& k, ThreadPool& pool, std::span<const GemmJob> jobs, int64_t cols,
                                const float* x, int64_t n_tokens, Scratch& scratch);

// Whether MatMulInterleavedSiluMul takes these gate and up weights (interleaved, `cols` wide) for
// n_tokens tokens: a small batch (2 to 16 tokens, within the table's rows per kernel call) of two
// types the table has interleaved kernels for, whose activations share one format.
bool SiluMulFusable(const KernelTable& k, TensorType gate_type, TensorType up_type, int64_t cols, int64_t n_tokens);

// A SiLU-gated feed-forward's first half for a small batch: Y[t][r] = silu(G[r] . X[t]) * (U[r] . X[t])
// (G, U: `gate` and `up`, whose y and y_stride are not used), the two products and the gating in one
// pass over their 16-row groups, each block's outputs gated on the stack, so that only y is written
// (a small batch's products wait on every line of output they write: matmul.cc). The same bits as
// MatMulInterleavedSameInput of the two and k.f.silu_mul over each token's row.
// REQUIRES: SiluMulFusable(k, gate.wtype, up.wtype, cols, n_tokens); gate.rows == up.rows.
void MatMulInterleavedSiluMul(const KernelTable& k, ThreadPool& pool, const GemmJob& gate, const GemmJob& up,
                              int64_t cols, const float* x, int64_t n_tokens, float* y, int64_t y_stride,
                              Scratch& scratch);

// Whether MatMulInterleavedSiluMulActs takes this pair and a `down` of type down_type: SiluMulFusable,
// the gated rows whole super-blocks (rows % 256 == 0), down's interleaved activations Q8_K.
bool SiluMulActsFusable(const KernelTable& k, TensorType gate_type, TensorType up_type, TensorType down_type,
                        int64_t cols, int64_t rows, int64_t n_tokens);

// MatMulInterleavedSiluMul whose gated rows go straight into down_type's interleaved activations:
// each thread quantizes the 256 gated values of a block as it makes them, so the gated rows are
// never written as floats (act: n_tokens rows, the returned stride apart, for MatMulInterleavedActs
// of the down matrix). The same bytes as quantizing MatMulInterleavedSiluMul's rows for down.
// REQUIRES: SiluMulActsFusable(k, gate.wtype, up.wtype, down_type, cols, gate.rows, n_tokens);
// gate.rows == up.rows.
size_t MatMulInterleavedSiluMulActs(const KernelTable& k, ThreadPool& pool, const GemmJob& gate, const GemmJob& up,
                                    TensorType down_type, int64_t cols, const float* x, int64_t n_tokens,
                                    std::vector<uint8_t>& act, Scratch& scratch);

// MatMulInterleaved of activations already in wtype's interleaved format (a, n_tokens rows a_stride
// bytes apart, finished: FinishActRow). add: Y[t][r] += W[r] . X[t] (REQUIRES then SmallBatch).
void MatMulInterleavedActs(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
                           int64_t cols, const uint8_t* a, size_t a_stride, int64_t n_tokens, float* y, int64_t y_stride,
                           bool add = false);

// Whether n_tokens is a small batch: 2 to 16 tokens, each group's products made while it is in L1
// (one kernel call per group, two where the table takes fewer rows a call than the batch has).
bool SmallBatch(int64_t n_tokens);

// Y[t][r] += W[r] . X[t]: MatMulInterleaved added to y (a residual connection), each block's
// products added as they are made, so no separate output is written and read back. Each sum is
// the float addition of the product to y's value: the bits of MatMulInterleaved then k.f.add.
// REQUIRES: as MatMulInterleaved; SmallBatch(n_tokens).
void MatMulInterleavedAdd(const KernelTable& k, ThreadPool& pool, TensorType wtype, const void* w, int64_t rows,
                          int64_t cols, const float* x, int64_t n_tokens, float* y, int64_t y_stride, Scratch& scratch);

// One product of a batch: y[r] = W[r] . x for r < rows.
struct MatVecJob {
  TensorType wtype = TensorType::kF32;
  const void* w = nullptr;
  int64_t rows = 0, cols = 0;
  const float* x = nullptr;
  float* y = nullptr;
  // w is in the interleaved layout (kernels/interleave.h). REQUIRES then: rows % 16 == 0 and the
  // table has gemm_interleaved for wtype (and its activation quantizer).
  bool interleaved = false;
};

// Every job of `jobs` in one pass of the pool, the rows of all of them split among the threads:
// for many small products (the experts a decode step uses) one wake-up of the pool instead of
// one per product. A job whose x and activation format equal the previous job's reuses its
// quantized activations.
void MatVecBatch(const KernelTable& k, ThreadPool& pool, std::span<const MatVecJob> jobs, Scratch& scratch);

}  // namespace tandem::kernels

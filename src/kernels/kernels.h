// kernels: the compute kernels of the engine behind one dispatch table per instruction set.
//
// A KernelTable holds, for every weight type, the dot product of a weight row with an activation
// row (in the type's activation format, see quant/quant.h) and a multi-row variant that reuses
// each unpacked weight block for several activation rows (prompt processing); the activation
// quantizers; and the float operations a transformer needs. The scalar table is built from the
// quant reference and is always present; each ISA file (kernels_avx2.cc, kernels_avx512.cc,
// kernels_neon.cc) overrides the entries it implements, so an entry is never missing.
//
// The best table for this CPU is chosen once, at first use, from CPU features: one binary runs on
// any x86-64 (or ARM64) machine. ISA-specific code and macros live only in this folder.
//
// Thread safety: tables are immutable after first use; all kernels are reentrant.
// REQUIRES (all row kernels): n is a multiple of the weight type's block size; rows are
// readable for their full size; output and input buffers do not overlap unless stated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "quant/quant.h"

namespace tandem::kernels {

using quant::TensorType;

enum class Isa { kScalar, kAvx2, kAvx512, kAmx, kNeon, kNeonDot };
const char* IsaName(Isa isa);

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avx512vbmi = false, avxvnni = false;
  bool amx_int8 = false;  // AMX tiles with int8 products (the OS permission is asked separately)
  bool neon = false, dotprod = false;
  std::string Describe() const;  // "avx2 fma f16c avx512f ..."
};
const CpuFeatures& Cpu();

// One weight row (this type) dotted with `na` activation rows, `a_stride` bytes apart:
// out[j] = w . a_j for j < na. REQUIRES: 1 <= na <= kMaxMultiRows.
inline constexpr int kMaxMultiRows = 8;
using VecDotMultiFn = void (*)(int64_t n, const void* w, const void* a, size_t a_stride, int na,
                               float* out);

struct TypeKernels {
  TensorType act_type = TensorType::kF32;
  quant::VecDotFn vec_dot = nullptr;  // nullptr: the type cannot be used as weights
  VecDotMultiFn vec_dot_multi = nullptr;
};

struct FloatOps {
  // y = x / rms(x) * w, rms over n elements. y may alias x.
  void (*rmsnorm)(const float* x, const float* w, float* y, int64_t n, float eps);
  // Softmax of x[0..n) in place.
  void (*softmax)(float* x, int64_t n);
  // y = silu(gate) * up. y may alias gate or up.
  void (*silu_mul)(const float* gate, const float* up, float* y, int64_t n);
  // y = a + b. y may alias a or b.
  void (*add)(const float* a, const float* b, float* y, int64_t n);
  // x *= s.
  void (*scale)(float* x, float s, int64_t n);
  // Sum of a[i] * b[i].
  float (*dot)(const float* a, const float* b, int64_t n);
  // y += s * x.
  void (*axpy)(float s, const float* x, float* y, int64_t n);
  // Rotary embedding of one head of `head_dim` values for one position, in place, with
  // cos/sin[head_dim / 2] for that position. neox=false rotates pairs (x[2i], x[2i+1]) (GGUF
  // llama order); neox=true rotates (x[i], x[i + head_dim/2]) (qwen2/qwen3 order).
  void (*rope)(float* x, int64_t head_dim, const float* cos, const float* sin, bool neox);
};

// Attention over KV cache rows of type F32, F16 or Q8_0 (model/kv_cache.h). `scores` and
// `accumulate` are small matrix products whose second operand is a list of rows given by
// pointer (cache cells are not contiguous): each row is loaded once for several query rows.
// REQUIRES: for Q8_0 rows, n is a multiple of 32 and each row pointer starts a block.
struct AttnOps {
  // y = x rounded to F16 (nearest even), n values.
  void (*fp32_to_fp16)(const float* x, uint16_t* y, int64_t n);
  // y = x widened from F16, n values.
  void (*fp16_to_fp32)(const uint16_t* x, float* y, int64_t n);
  // y[i] = exp(x[i] - m) for i < n; returns the sum of the y[i]. y may alias x.
  float (*exp_sum)(const float* x, float m, float* y, int64_t n);
  // s[i * lds + j] = q_i . row_j for i < nq, j < nk: q_i = q + i * ldq holds n floats, row_j =
  // rows[j] holds n values of `type`.
  void (*scores)(TensorType type, int64_t n, const float* q, int64_t ldq, int64_t nq,
                 const void* const* rows, int64_t nk, float* s, int64_t lds);
  // o_i += sum over j < nv of p[i * ldp + j] * row_j for i < no: o_i = o + i * ldo holds n floats,
  // row_j = rows[j] holds n values of `type`.
  void (*accumulate)(TensorType type, int64_t n, const float* p, int64_t ldp, int64_t no,
                     const void* const* rows, int64_t nv, float* o, int64_t ldo);
};

inline constexpr int kTypeSlots = 40;  // covers every TensorType id

// A group of 16 interleaved weight rows (kernels/interleave.h) dotted with `na` activation rows in
// the type's interleaved activation format (Q8S; Q4_K: Q8_K), `a_stride` bytes apart: out[r * ldo + j] = row j . a_r for r < na, j < 16.
// Each (row, activation row) result is computed the same way whatever na (batch invariance).
// REQUIRES: 1 <= na <= the table's gemm_interleaved_rows.
using GemmInterleavedFn = void (*)(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out,
                                   int64_t ldo);

// Interleaved weights unpacked once for the many token groups of a prompt, so that a kernel called
// for each group of activation rows does not unpack the same weights again each time (AMX: a
// group's B tiles as signed bytes and its scales as floats). `unpack` writes one group of 16 rows
// of n elements (its `w` as gemm_interleaved takes it) to `dst`, bytes_per_block * n / 32 bytes
// (any alignment; 64 is fastest); `gemm` over that equals gemm_interleaved over `w` to the bit.
// REQUIRES of gemm: kMaxMultiRows < na <= the table's gemm_interleaved_rows (the rows where the
// table's own kernel would unpack per call).
struct UnpackedGemm {
  int64_t bytes_per_block = 0;  // per 32 elements of a group
  void (*unpack)(int64_t n, const void* w, void* dst) = nullptr;
  GemmInterleavedFn gemm = nullptr;
};

struct KernelTable {
  Isa isa = Isa::kScalar;
  TypeKernels types[kTypeSlots];
  // Quantizers from float to each activation format, indexed by the format's type id
  // (F32 copies, Q8_0, Q8_1, Q8_K).
  quant::QuantizeRowFn quantize_act[kTypeSlots] = {};
  FloatOps f{};
  AttnOps attn{};  // a separate struct: ISA files that reassign f whole leave it as it was
  // Interleaved Q4_0 / Q5_0 / Q8_0 / Q4_K weights (null: this table has no such kernel, and weights
  // stay in the file's layout), with the activation quantizer to Q8S (Q4_K's Q8_K is above).
  GemmInterleavedFn gemm_interleaved[kTypeSlots] = {};
  int gemm_interleaved_rows = kMaxMultiRows;  // the most activation rows one call takes (AMX: 16)
  // The same products for a small batch (2 to kMaxMultiRows activation rows) whose weights come from
  // memory, each once (speculative verification, a server's decode step of a few sequences): the
  // kernel also requests lines a little ahead into L1 (x86_prefetch.h), which a prompt's calls,
  // finding their weights in L2, would pay for without gain. The same bits as gemm_interleaved.
  // Null: gemm_interleaved serves.
  GemmInterleavedFn gemm_streamed[kTypeSlots] = {};
  UnpackedGemm gemm_unpacked[kTypeSlots] = {};  // null gemm: none (the kernel unpacks per call)
  quant::QuantizeRowFn quantize_q8s = nullptr;

  const TypeKernels& of(TensorType t) const { return types[static_cast<uint32_t>(t)]; }
};

// The best table for this CPU (chosen once).
const KernelTable& Best();
// The table for `isa` if this build has it and this CPU runs it; nullptr otherwise.
const KernelTable* ForIsa(Isa isa);
// Every table this CPU can run, scalar first (for tests and benchmarks).
std::vector<const KernelTable*> Available();

}  // namespace tandem::kernels

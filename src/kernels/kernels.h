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

enum class Isa { kScalar, kAvx2, kAvx512, kNeon, kNeonDot };
const char* IsaName(Isa isa);

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avxvnni = false;
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

inline constexpr int kTypeSlots = 40;  // covers every TensorType id

struct KernelTable {
  Isa isa = Isa::kScalar;
  TypeKernels types[kTypeSlots];
  // Quantizers from float to each activation format, indexed by the format's type id
  // (F32 copies, Q8_0, Q8_1, Q8_K).
  quant::QuantizeRowFn quantize_act[kTypeSlots] = {};
  FloatOps f{};

  const TypeKernels& of(TensorType t) const { return types[static_cast<uint32_t>(t)]; }
};

// The best table for this CPU (chosen once).
const KernelTable& Best();
// The table for `isa` if this build has it and this CPU runs it; nullptr otherwise.
const KernelTable* ForIsa(Isa isa);
// Every table this CPU can run, scalar first (for tests and benchmarks).
std::vector<const KernelTable*> Available();

}  // namespace tandem::kernels

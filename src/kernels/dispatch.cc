// CPU feature detection and the choice of kernel table. The only place that asks the CPU.
#include <mutex>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "base/sys.h"
#include "kernels/internal.h"

namespace tandem::kernels {
namespace {

CpuFeatures Detect() {
  CpuFeatures c;
#if defined(__x86_64__)
  __builtin_cpu_init();
  c.avx2 = __builtin_cpu_supports("avx2");
  c.fma = __builtin_cpu_supports("fma");
  c.f16c = __builtin_cpu_supports("f16c");
  c.avx512f = __builtin_cpu_supports("avx512f");
  c.avx512bw = __builtin_cpu_supports("avx512bw");
  c.avx512vl = __builtin_cpu_supports("avx512vl");
  c.avx512dq = __builtin_cpu_supports("avx512dq");
  c.avx512vnni = __builtin_cpu_supports("avx512vnni");
  c.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  c.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
  c.avxvnni = __builtin_cpu_supports("avxvnni");
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) c.amx_int8 = (d >> 24 & 1) && (d >> 25 & 1);  // AMX-TILE, AMX-INT8
#elif defined(__aarch64__)
  c.neon = true;  // Advanced SIMD is part of the ARMv8-A base
  c.dotprod = sys::ArmHasDotProd();  // Linux: HWCAP_ASIMDDP; macOS: hw.optional.arm.FEAT_DotProd
#endif
  return c;
}

struct Tables {
  KernelTable scalar, avx2, avx512, amx, neon, neondot;
  bool has_avx2 = false, has_avx512 = false, has_amx = false, has_neon = false, has_neondot = false;
};

const Tables& AllTables() {
  static const Tables tables = [] {
    Tables t;
    const CpuFeatures& c = Cpu();
    internal::FillScalar(&t.scalar);
    if (internal::HasAvx2() && c.avx2 && c.fma && c.f16c) {
      t.avx2 = t.scalar;
      internal::FillAvx2(&t.avx2);
      t.has_avx2 = true;
    }
    if (t.has_avx2 && internal::HasAvx512() && c.avx512f && c.avx512bw && c.avx512vl &&
        c.avx512dq && c.avx512vnni) {
      t.avx512 = t.avx2;  // what AVX-512 does not override stays AVX2
      internal::FillAvx512(&t.avx512);
      t.has_avx512 = true;
    }
    // AMX needs the OS's permission for the tile state, asked once for the whole process (and
    // VBMI, which its Q4_K kernel's lookup uses; every CPU with AMX has it).
    if (t.has_avx512 && internal::HasAmx() && c.amx_int8 && c.avx512vbmi && sys::RequestAmxTiles()) {
      t.amx = t.avx512;
      internal::FillAmx(&t.amx);
      t.has_amx = true;
    }
    if (internal::HasNeon() && c.neon) {
      t.neon = t.scalar;
      internal::FillNeon(&t.neon);
      t.has_neon = true;
    }
    if (t.has_neon && internal::HasNeonDot() && c.dotprod) {
      t.neondot = t.neon;
      internal::FillNeonDot(&t.neondot);
      t.has_neondot = true;
    }
    return t;
  }();
  return tables;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "avx512-amx";
    case Isa::kNeon: return "neon";
    case Isa::kNeonDot: return "neon-dotprod";
  }
  return "?";
}

std::string CpuFeatures::Describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(avx512vbmi, "avx512vbmi");
  add(avxvnni, "avxvnni");
  add(amx_int8, "amx-int8");
  add(neon, "neon");
  add(dotprod, "dotprod");
  return s.empty() ? "none" : s;
}

const CpuFeatures& Cpu() {
  static const CpuFeatures c = Detect();
  return c;
}

const KernelTable* ForIsa(Isa isa) {
  const Tables& t = AllTables();
  switch (isa) {
    case Isa::kScalar: return &t.scalar;
    case Isa::kAvx2: return t.has_avx2 ? &t.avx2 : nullptr;
    case Isa::kAvx512: return t.has_avx512 ? &t.avx512 : nullptr;
    case Isa::kAmx: return t.has_amx ? &t.amx : nullptr;
    case Isa::kNeon: return t.has_neon ? &t.neon : nullptr;
    case Isa::kNeonDot: return t.has_neondot ? &t.neondot : nullptr;
  }
  return nullptr;
}

std::vector<const KernelTable*> Available() {
  std::vector<const KernelTable*> out;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx, Isa::kNeon, Isa::kNeonDot}) {
    if (const KernelTable* t = ForIsa(i)) out.push_back(t);
  }
  return out;
}

const KernelTable& Best() {
  static const KernelTable* best = [] {
    const KernelTable* b = ForIsa(Isa::kScalar);
    for (const KernelTable* t : Available()) b = t;  // Available() is in ascending order
    return b;
  }();
  return *best;
}

}  // namespace tandem::kernels

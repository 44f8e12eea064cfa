// Software prefetch of weight streams, shared by the x86 kernels (x86_common.h) and the AMX ones
// (kernels_amx.cc). Internal to src/kernels. Each including file gets its own copy (unnamed
// namespace).
#pragma once

#include <immintrin.h>

namespace tandem::kernels::x86 {
namespace {

// Decode (NA == 1) reads each weight once, from DRAM. A quantized kernel does enough work per
// cache line that the lines it will load next are requested too late: the out-of-order window
// covers only ~1 KB ahead and the hardware prefetcher does not run far enough ahead to cover
// the memory latency. So the one-row kernels request the weights kPrefetchBytes ahead of the
// block they are working on, spread one prefetch per line as they go. Measured on the Zen 5 VM
// this project develops on (Q4_K 5632x2048 from DRAM, paired runs): 2 KB ahead is slower,
// 6-12 KB ahead 11-20 % faster, 8 KB the best; 8 KB stays within any L1D of 32 KB or more.
// Multi-row calls prefetch too: a small batch (a server's decode step of a few sequences,
// speculative verification) also reads each weight row once from DRAM. Measured on this
// project's 2-core Xeon VM, TinyLlama-shaped Q4_K_M, 2 threads: a 4-token batch went from 52.9 to
// 80.1 tokens/s and an 8-token one to 118.6, while 512-token prompts (whose later token groups
// find the row in cache) stayed within noise (108.7 -> 107.5).
// The prefetches go to L2 (PREFETCHT1), not L1: on this project's Xeon VM a stream prefetched
// into L1 held the line-fill buffers and ran slower (matvec_bench 5632x2048, 1 thread, L1 -> L2:
// Q6_K 10.9 -> 13.3 GiB/s, interleaved Q5_0 12.0 -> 13.6, Q4_K unchanged; tg64 medians of 3
// alternating rounds: gemma-3-1b Q4_K_M 29.72 -> 32.86 t/s, qwen3-30b-a3b x12 36.62 -> 37.66,
// TinyLlama 41.61 -> 41.73). AMD's cores treat both hints alike.
inline constexpr int kPrefetchBytes = 8192;

// Prefetches the cache lines of `bytes` weight bytes starting kPrefetchBytes past `p`.
// Prefetches never fault, so running past the end of the matrix is harmless.
// An asm statement, not _mm_prefetch: GCC 12 silently dropped the builtin's prefetches from the
// unrolled bodies of the multi-row interleaved kernels (Q4_K with 3-4 activation rows kept 4 of
// 12 per super-block step, Q6_K with 2-4 rows lost every nibble line), so a small batch read its
// weights from DRAM unprefetched. Measured on the Zen 5 VM, one thread, 16-row groups of
// interleaved Q4_K 2048 wide streamed from DRAM: 4 rows 1200-1262 -> 623-745 ns per group, 8 rows
// 1992 -> 1177 (the same groups in L2: 500 and 1000).
template <int NA, int kBytes>
inline void PrefetchAhead(const void* p) {
  if constexpr (NA >= 1 && kPrefetchBytes > 0) {
    const char* q = static_cast<const char*>(p) + kPrefetchBytes;
#pragma GCC unroll 8
    for (int o = 0; o < kBytes; o += 64) asm volatile("prefetcht1 %0" : : "m"(q[o]));
  }
}

// A kernel of several activation rows streaming its weights (a small batch: KernelTable's
// gemm_streamed) computes for long enough per line that lines the far prefetch above brought
// into L2 are still waited for when their loads come (from L2, or later from DRAM where that
// prefetch was late): it also requests, as it reads each line of quants, the line kNearBytes on
// into L1. A prompt's kernels, whose weights are in L2 for all but the first token group, do not:
// the extra load slots cost the Q6_K kernel (bound by loads at 8 rows) about 3 % of pp512. Measured on the Xeon VM, TinyLlama-shaped Q4_K_M, 2
// threads, `bench --small-batch 8`, alternating rounds: 256, 512 and 1024 bytes on all cut the
// 8-token forward by about 1 ms (1.57-1.59 -> 1.49-1.55 times a 1-token step); 1024 read best in
// matvec_bench (interleaved Q4_K and Q6_K 5632x2048 streamed, 8 rows, 2 threads).
inline constexpr int kNearBytes = 1024;

inline void PrefetchNear(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(static_cast<const char*>(p)[kNearBytes]));
}

}  // namespace
}  // namespace tandem::kernels::x86

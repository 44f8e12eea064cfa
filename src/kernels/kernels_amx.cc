// The AMX kernel table: the AVX-512 table, with the interleaved Q4_0 / Q5_0 / Q8_0 / Q4_K products of 9
// to 16 activation rows (a tile's rows) (prompts, large batches) done by Intel AMX tile
// instructions. Per 32-element block of 16 weight rows: the unpacked weights are an AMX B tile
// (kernels/interleave.h: lane r of chunk c = row r's elements 4c..4c+3), the activation rows'
// quants an A tile read in place, and one tile product gives every row's integer sum, which a
// VPDPBUSD loop builds 64 products at a time. Q8_0's tile is its stored bytes (unsigned, TDPBSUD,
// the bias taken out per activation row as the VNNI kernel does); Q4_0, Q5_0 and Q4_K are
// unpacked to signed bytes with the bias already out (TDPBSSD), which saves the per-row work.
// Up to 8 rows (decode, speculative verification, a server's small batches) stay on the VNNI
// kernels, as fast or faster there: on the Xeon VM, matvec_bench, 2 alternating runs, Q4_K
// 5632x2048 from DRAM, 2 threads, 8 rows 425-439 us on tiles against 346-368 on VNNI, 4 rows
// 377-389 against 261-270; one L1-resident group of 8 rows 1471-1519 against 1308-1356 ns;
// Q4_0 and Q8_0 4 rows in L1 835-940 against 576-717 ns, 8 rows within the noise; from 128
// rows on the tiles lead (Q4_K 5632x2048 x 512: 13.6-13.9 against 16.4-17.0 ms).
// The sums are exact integers either way and the float step after them is the VNNI kernel's own
// (x86_interleaved.h), so a row gets the same bits from both, whichever kernel a call's row count
// picks. A prompt passes each group of weights once per 16 tokens: Q4_0, Q5_0 and Q4_K are also
// offered unpacked ahead (UnpackedGemm, kernels.h), so that the unpacking (Q4_K: its scales' too) is
// done once per prompt, not once per 16 tokens (Xeon VM, 8 alternating rounds, medians, pp512:
// Q4_0 319.7 -> 371.9 tokens/s; Q4_K_M 1.02-1.06 times, see docs/architecture.md).
//
// Tile state: the OS grants it per process (sys::RequestAmxTiles, asked before this table is
// built); each thread loads its tile configuration before its first product and again when the
// number of activation rows changes.
#include <immintrin.h>

#include <cstddef>

#include "kernels/internal.h"
#include "kernels/x86_interleaved.h"
#include "kernels/x86_prefetch.h"

namespace tandem::kernels::internal {
namespace {

using x86::Il;
using x86::IlBlock;

// The AVX-512 table's kernels, which take up to kMaxMultiRows activation rows.
GemmInterleavedFn g_vnni[3];

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tiles: 0 the sums (na rows of 16 int32), 1 the activations (na rows of a block's 32 quants),
// 2 the weights (8 rows of 64 bytes: 4 elements of 16 rows each).
void Configure(int na) {
  thread_local int configured = 0;
  if (configured == na) return;
  TileConfig c;
  for (int base : {0, 3}) {  // two blocks in flight: tiles 0-2 and 3-5
    c.rows[base] = static_cast<uint8_t>(na);
    c.colsb[base] = 64;
    c.rows[base + 1] = static_cast<uint8_t>(na);
    c.colsb[base + 1] = 32;
    c.rows[base + 2] = 8;
    c.colsb[base + 2] = 64;
  }
  // GCC 12 does not see that LDTILECFG reads `c` and may drop the stores that fill it (then the
  // first tile instruction faults): the empty asm makes them needed.
  asm volatile("" : : "m"(c));
  _tile_loadconfig(&c);
  configured = na;
}

#pragma GCC diagnostic push  // GCC 12's false positive on its own 512-bit intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// A lookup for VPERMB (which reads an index's low six bits): byte i is (i mod 16) - bias, so a
// byte maps to its low nibble minus the bias whatever its upper bits hold.
template <int kBias>
__attribute__((always_inline)) inline __m512i NibbleMinus() {
  alignas(64) int8_t t[64];
  for (int i = 0; i < 64; ++i) t[i] = static_cast<int8_t>((i & 15) - kBias);
  return _mm512_load_si512(t);
}

// Q4_0 and Q5_0's quants minus their bias (8, 16) as signed bytes, in UnpackIl's layout: a TDPBSSD
// over them gives the sums the VNNI kernel gets from its unsigned bytes and the bias term it
// starts from (x86::BiasIl), so the epilogue adds no bias per activation row.
template <Il K>
__attribute__((always_inline)) inline void UnpackSigned(const uint8_t* blk, __m512i table, __m512i u[8]) {
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i p = x86::LoadOnce(blk + 64 * c);
    u[c] = _mm512_permutexvar_epi8(p, table);                             // elements 4c..4c+3
    u[4 + c] = _mm512_permutexvar_epi8(_mm512_srli_epi16(p, 4), table);  // elements 16+4c..
  }
  if constexpr (K == Il::kQ5_0) x86::AddFifthBitsIl(blk, u);
}

// Q4_0 and Q5_0 unpacked ahead (UnpackedGemm, kernels.h): per block its B tile as UnpackSigned
// makes it, then the 16 rows' scales as floats (ScalesIl's, exact), so that a prompt's token groups
// after the first load their tiles as they are. Measured in a throwaway copy of the kernel (Xeon VM,
// 16 rows, one group in L1): the unpacking is 4.4 of a block's 30 ns.
constexpr int64_t kUnpackedTile = 8 * 64;
constexpr int64_t kUnpackedBlockBytes = kUnpackedTile + 16 * sizeof(float);

template <Il K>
void UnpackAmx(int64_t n, const void* w, void* dst) {
  const int64_t nb = n / quant::kQK;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  uint8_t* d = static_cast<uint8_t*>(dst);
  const __m512i table = NibbleMinus<IlBlock<K>::kBias>();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = wb + b * IlBlock<K>::kBytes;
    uint8_t* out = d + b * kUnpackedBlockBytes;
    __m512i u[8];
    UnpackSigned<K>(blk, table, u);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) _mm512_storeu_si512(out + 64 * c, u[c]);
    _mm512_storeu_ps(out + kUnpackedTile, x86::ScalesIl<K>(blk));
  }
}

// kUnpacked: `w` is what UnpackAmx made of the group, not the group itself.
template <Il K, int NA, bool kUnpacked = false>
void GemmAmx(int64_t n, const void* w, const void* a, size_t a_stride, float* out, int64_t ldo) {
  constexpr int kBytes = kUnpacked ? kUnpackedBlockBytes : IlBlock<K>::kBytes;
  // Q4_0 and Q5_0 are unpacked to signed bytes (TDPBSSD, no bias to add); Q8_0's tiles are its
  // stored bytes, unsigned (TDPBSUD, the bias added per activation row).
  constexpr bool kSigned = K != Il::kQ8_0;
  static_assert(!kUnpacked || kSigned, "Q8_0's tiles are its stored bytes: nothing to unpack");
  Configure(NA);
  const int64_t nb = n / quant::kQK;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* act = static_cast<const uint8_t*>(a) + offsetof(BlockQ8S, qs);
  const __m512i table = NibbleMinus<IlBlock<K>::kBias>();
  // [stage][block of a pair]: a pair is unpacked one pair ahead of its tile loads, which would
  // otherwise wait for the unpacking's stores to reach the cache (a tile load takes no store
  // forwarding).
  alignas(64) uint8_t unpacked[2][2][8 * 64];
  // [stage][block of a pair]: a pair's float step runs after the next pair's tile products are
  // issued, so that its vector loads do not wait for the tile stores just made either.
  alignas(64) int32_t sums[2][2][NA * 16];
  __m512 acc[NA];
#pragma GCC unroll 16
  for (int r = 0; r < NA; ++r) acc[r] = _mm512_setzero_ps();
  auto weights = [&](const uint8_t* blk, uint8_t* buf) -> const uint8_t* {
    if constexpr (kUnpacked) return blk;  // the tile as it is, already in the cache
    x86::PrefetchAhead<1, kBytes>(blk);  // a small batch reads each weight once, from memory
    if constexpr (!kSigned) {
      return blk;  // the stored bytes are the tile
    } else {
      __m512i u[8];
      UnpackSigned<K>(blk, table, u);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) _mm512_store_si512(buf + 64 * c, u[c]);
      return buf;
    }
  };
  auto epilogue = [&](int64_t b, const int32_t* s) __attribute__((always_inline)) {
    const __m512 dw = kUnpacked ? _mm512_loadu_ps(wb + b * kBytes + kUnpackedTile) : x86::ScalesIl<K>(wb + b * kBytes);
#pragma GCC unroll 16
    for (int r = 0; r < NA; ++r) {
      const BlockQ8S& y = reinterpret_cast<const BlockQ8S*>(static_cast<const uint8_t*>(a) + r * a_stride)[b];
      const __m512i t = _mm512_load_si512(s + 16 * r);
      acc[r] = kSigned ? x86::AccumulateIl(acc[r], t, y, dw) : x86::AddBlockIl<K>(acc[r], t, y, dw);
    }
  };
  auto product = [&](int64_t blk, const uint8_t* weights_tile, int32_t* s) __attribute__((always_inline)) {
    _tile_zero(0);
    _tile_loadd(2, weights_tile, 64);
    _tile_loadd(1, act + blk * sizeof(BlockQ8S), static_cast<long>(a_stride));
    if constexpr (kSigned) {
      _tile_dpbssd(0, 1, 2);
    } else {
      _tile_dpbsud(0, 1, 2);
    }
    _tile_stored(0, s, 64);
  };
  int64_t b = 0;
  const uint8_t* next[2] = {};
  if (nb >= 2) {
    next[0] = weights(wb, unpacked[0][0]);
    next[1] = weights(wb + kBytes, unpacked[0][1]);
  }
  for (; b + 2 <= nb; b += 2) {  // two blocks: independent tiles, so their products overlap
    const int stage = static_cast<int>((b / 2) & 1);
    _tile_zero(0);
    _tile_zero(3);
    _tile_loadd(2, next[0], 64);
    _tile_loadd(5, next[1], 64);
    _tile_loadd(1, act + b * sizeof(BlockQ8S), static_cast<long>(a_stride));
    _tile_loadd(4, act + (b + 1) * sizeof(BlockQ8S), static_cast<long>(a_stride));
    if (b + 4 <= nb) {  // the next pair, into the other stage
      next[0] = weights(wb + (b + 2) * kBytes, unpacked[stage ^ 1][0]);
      next[1] = weights(wb + (b + 3) * kBytes, unpacked[stage ^ 1][1]);
    }
    if constexpr (kSigned) {
      _tile_dpbssd(0, 1, 2);
      _tile_dpbssd(3, 4, 5);
    } else {
      _tile_dpbsud(0, 1, 2);
      _tile_dpbsud(3, 4, 5);
    }
    _tile_stored(0, sums[stage][0], 64);
    _tile_stored(3, sums[stage][1], 64);
    if (b >= 2) {  // the previous pair, in block order as the VNNI kernel adds them
      epilogue(b - 2, sums[stage ^ 1][0]);
      epilogue(b - 1, sums[stage ^ 1][1]);
    }
  }
  if (b >= 2) {
    const int last = static_cast<int>((b / 2 - 1) & 1);
    epilogue(b - 2, sums[last][0]);
    epilogue(b - 1, sums[last][1]);
  }
  if (b < nb) {
    product(b, weights(wb + b * kBytes, unpacked[0][0]), sums[0][0]);
    epilogue(b, sums[0][0]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < NA; ++r) _mm512_storeu_ps(out + r * ldo, acc[r]);
}

// Interleaved Q4_K (kernels/interleave.h): per sub-block, the 16 rows' nibbles minus 7 are a B
// tile of signed bytes (-7..8, one VPERMB lookup per 64 bytes) and the activation rows' quants
// an A tile read in place from their Q8_K rows, so that one TDPBSSD gives every row's
// T_j = S_j - 7 B_j (S_j the sum over the nibbles, B_j the activations' sum over the sub-block),
// which for any int8 quants (the Q8_K quantizer's are -127..127) lies in -32768..32512: a 16-bit
// number, so one VPDPWSSD (the sum's upper half is its sign, multiplied by zero) adds sc_j T_j, as
// the VNNI kernel does with its sums over half sub-blocks. The 7 sc_j B_j taken out come back per
// super-block as the mins do, two sub-blocks per VPDPWSSD against the activation's 32-element sums. The integer sum is the same number as the
// VNNI kernel's and the float step after it its own (x86_interleaved.h), so a row gets the same
// bits from both. (With nibbles minus 8, T_j would reach 32768 for a sub-block of activations all
// -128 against nibbles all 0.)
// Sub-block J of a super-block: its B tile from `b` (unpacked), its A tile the activation rows'
// quants there (`y`: the first row's super-block), its sums to `sums`. Even and odd sub-blocks
// use tiles 0-2 and 3-5, so one's product overlaps the other's loads and stores.
template <int J>
__attribute__((always_inline)) inline void Q4KSubBlock(const uint8_t* b, const uint8_t* y, size_t a_stride,
                                                       int32_t* sums) {
  // (GCC's tile intrinsics take the tile numbers as literals.)
  if constexpr ((J & 1) == 0) {
    _tile_zero(0);
    _tile_loadd(2, b, 64);
    _tile_loadd(1, y + 32 * J, static_cast<long>(a_stride));
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, sums, 64);
  } else {
    _tile_zero(3);
    _tile_loadd(5, b, 64);
    _tile_loadd(4, y + 32 * J, static_cast<long>(a_stride));
    _tile_dpbssd(3, 4, 5);
    _tile_stored(3, sums, 64);
  }
}

// The bias taken out of each nibble.
constexpr int kK4Bias = 7;

// A super-block's 16 rows' scales as the float step takes them: sc_j widened to int32 lanes, the
// 7 sc_j pairs and the mins' pairs (VPDPWSSD operands), d and dmin as floats.
struct K4Steps {
  __m512i sc32[8];
  __m512i bias[4];
  x86::K4IlMins mins;
  __m512 d, dmin;
};

__attribute__((always_inline)) inline void MakeK4Steps(const uint8_t* blk, K4Steps* st) {
  x86::K4IlScales sm;
  x86::UnpackK4IlScales(blk, &sm);
  x86::K4IlMinPairs(sm, &st->mins);
  st->sc32[0] = x86::K4IlScale<0>(sm);
  st->sc32[1] = x86::K4IlScale<1>(sm);
  st->sc32[2] = x86::K4IlScale<2>(sm);
  st->sc32[3] = x86::K4IlScale<3>(sm);
  st->sc32[4] = x86::K4IlScale<4>(sm);
  st->sc32[5] = x86::K4IlScale<5>(sm);
  st->sc32[6] = x86::K4IlScale<6>(sm);
  st->sc32[7] = x86::K4IlScale<7>(sm);
  // kK4Bias sc_j as the mins' pairs are made: lane r of bias[k] holds sub-blocks 2k and 2k+1.
  const __m512i seven = _mm512_set1_epi32(kK4Bias);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    st->bias[k] = _mm512_mullo_epi32(_mm512_or_si512(st->sc32[2 * k], _mm512_slli_epi32(st->sc32[2 * k + 1], 16)), seven);
  }
  st->d = x86::K4IlD(blk);
  st->dmin = x86::K4IlDmin(blk);
}

// Q4_K unpacked ahead (UnpackedGemm, kernels.h), per super-block: its 8 B tiles as the kernel's
// unpacking makes them, then its K4Steps (18 vectors, in the order below), 5248 bytes.
constexpr int64_t kK4Tiles = 8 * 8 * 64;
constexpr int64_t kK4UnpackedBytes = kK4Tiles + 18 * 64;

// A K4Steps as 18 vectors at o: sc32[0..8), bias[0..4), mins.p[0..4), d, dmin.
__attribute__((always_inline)) inline void StoreK4Steps(const K4Steps& st, uint8_t* o) {
  for (int j = 0; j < 8; ++j) _mm512_storeu_si512(o + 64 * j, st.sc32[j]);
  for (int k = 0; k < 4; ++k) _mm512_storeu_si512(o + 64 * (8 + k), st.bias[k]);
  for (int k = 0; k < 4; ++k) _mm512_storeu_si512(o + 64 * (12 + k), st.mins.p[k]);
  _mm512_storeu_ps(o + 64 * 16, st.d);
  _mm512_storeu_ps(o + 64 * 17, st.dmin);
}

__attribute__((always_inline)) inline void LoadK4Steps(const uint8_t* o, K4Steps* st) {
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) st->sc32[j] = _mm512_loadu_si512(o + 64 * j);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) st->bias[k] = _mm512_loadu_si512(o + 64 * (8 + k));
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) st->mins.p[k] = _mm512_loadu_si512(o + 64 * (12 + k));
  st->d = _mm512_loadu_ps(o + 64 * 16);
  st->dmin = _mm512_loadu_ps(o + 64 * 17);
}

// The 8 sub-blocks' B tiles of a super-block: its nibbles minus kK4Bias (one VPERMB lookup per 64
// bytes), sub-block j to u + 512 j.
template <bool kPrefetch>
__attribute__((always_inline)) inline void UnpackK4Tiles(const uint8_t* blk, __m512i table, int8_t* u) {
  // A small batch reads each weight once, from memory: the super-block kPrefetchBytes ahead
  // is requested a line per chunk unpacked here (a burst of 36 at once was slower).
  if constexpr (kPrefetch) x86::PrefetchAhead<1, x86::kK4IlBytes - 2048>(blk + 2048);
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      if constexpr (kPrefetch) x86::PrefetchAhead<1, 64>(blk + 512 * p + 64 * c);
      const __m512i v = x86::LoadOnce(blk + 512 * p + 64 * c);
      _mm512_storeu_si512(u + 512 * (2 * p) + 64 * c, _mm512_permutexvar_epi8(v, table));
      _mm512_storeu_si512(u + 512 * (2 * p + 1) + 64 * c, _mm512_permutexvar_epi8(_mm512_srli_epi16(v, 4), table));
    }
  }
}

void UnpackAmxQ4K(int64_t n, const void* w, void* dst) {
  const int64_t nb = n / quant::kQKK;
  const __m512i table = NibbleMinus<kK4Bias>();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* blk = static_cast<const uint8_t*>(w) + i * x86::kK4IlBytes;
    uint8_t* out = static_cast<uint8_t*>(dst) + i * kK4UnpackedBytes;
    UnpackK4Tiles<false>(blk, table, reinterpret_cast<int8_t*>(out));
    K4Steps st;
    MakeK4Steps(blk, &st);
    StoreK4Steps(st, out + kK4Tiles);
  }
}

// kUnpacked: `w` is what UnpackAmxQ4K made of the group, not the group itself.
template <int NA, bool kUnpacked = false>
void GemmAmxQ4K(int64_t n, const void* w, const void* a, size_t a_stride, float* out, int64_t ldo) {
  Configure(NA);
  constexpr int64_t kStride = kUnpacked ? kK4UnpackedBytes : x86::kK4IlBytes;
  const int64_t nb = n / quant::kQKK;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* act = static_cast<const uint8_t*>(a) + offsetof(quant::BlockQ8_K, qs);
  const __m512i table = NibbleMinus<kK4Bias>();
  // The 8 sub-blocks' B tiles, [stage]: a super-block is unpacked one ahead of its tile loads, which
  // would otherwise wait for the unpacking's stores to reach the cache (no store forwarding).
  alignas(64) int8_t unpacked[kUnpacked ? 1 : 2][8 * 8 * 64];
  // The sums, [stage]: a super-block's float step runs after the next one's tile products are
  // issued, so its vector loads do not wait for the tile stores just made either.
  alignas(64) int32_t sums[2][8][NA * 16];
  __m512 acc[NA];
#pragma GCC unroll 16
  for (int r = 0; r < NA; ++r) acc[r] = _mm512_setzero_ps();
  // Super-block i's tiles: unpacked here a super-block ahead, or as they are.
  auto tiles = [&](int64_t i) __attribute__((always_inline)) -> const uint8_t* {
    if constexpr (kUnpacked) return wb + i * kStride;
    return reinterpret_cast<const uint8_t*>(unpacked[i & 1]);
  };
  // Super-block i's scales, mins and float step over its sums (in order of i, as the VNNI kernel).
  auto finish = [&](int64_t i, int32_t (*sm_sums)[NA * 16]) __attribute__((always_inline)) {
    const uint8_t* blk = wb + i * kStride;
    K4Steps st;
    if constexpr (kUnpacked) {
      LoadK4Steps(blk + kK4Tiles, &st);
    } else {
      MakeK4Steps(blk, &st);
    }
#pragma GCC unroll 16
    for (int r = 0; r < NA; ++r) {
      const auto* row = reinterpret_cast<const quant::BlockQ8_K*>(static_cast<const uint8_t*>(a) + r * a_stride);
      const int16_t* bsums = x86::K4IlSums(row, nb, i);
      __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) isum = _mm512_dpwssd_epi32(isum, st.bias[k], x86::BroadcastI32(bsums + 2 * k));
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) isum = _mm512_dpwssd_epi32(isum, st.sc32[j], _mm512_load_si512(sm_sums[j] + 16 * r));
      acc[r] = x86::K4IlAddScaled(acc[r], isum, row[i], bsums, st.mins, st.d, st.dmin);
    }
  };
  if (!kUnpacked && nb > 0) UnpackK4Tiles<true>(wb, table, unpacked[0]);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* u = tiles(i);
    int32_t (*sm)[NA * 16] = sums[i & 1];
    const uint8_t* y = act + i * sizeof(quant::BlockQ8_K);
    Q4KSubBlock<0>(u, y, a_stride, sm[0]);
    Q4KSubBlock<1>(u + 512, y, a_stride, sm[1]);
    Q4KSubBlock<2>(u + 512 * 2, y, a_stride, sm[2]);
    Q4KSubBlock<3>(u + 512 * 3, y, a_stride, sm[3]);
    Q4KSubBlock<4>(u + 512 * 4, y, a_stride, sm[4]);
    Q4KSubBlock<5>(u + 512 * 5, y, a_stride, sm[5]);
    Q4KSubBlock<6>(u + 512 * 6, y, a_stride, sm[6]);
    Q4KSubBlock<7>(u + 512 * 7, y, a_stride, sm[7]);
    if constexpr (!kUnpacked) {
      if (i + 1 < nb) UnpackK4Tiles<true>(wb + (i + 1) * kStride, table, unpacked[(i + 1) & 1]);
    }
    if (i > 0) finish(i - 1, sums[(i - 1) & 1]);
  }
  if (nb > 0) finish(nb - 1, sums[(nb - 1) & 1]);
#pragma GCC unroll 16
  for (int r = 0; r < NA; ++r) _mm512_storeu_ps(out + r * ldo, acc[r]);
}

#pragma GCC diagnostic pop

GemmInterleavedFn g_q4k_vnni;

// Calls f(std::integral_constant<int, na>) for kMaxMultiRows < na <= 16: the AMX kernels are
// made only for the row counts they are called with.
template <typename F>
__attribute__((always_inline)) inline void WithTileRows(int na, F& f) {
  x86::WithRows<16, F&, kMaxMultiRows + 1>(na, f);
}

void GemmAmxQ4KAny(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  if (na <= kMaxMultiRows) return g_q4k_vnni(n, w, a, a_stride, na, out, ldo);
  auto f = [&](auto rows) { GemmAmxQ4K<decltype(rows)::value>(n, w, a, a_stride, out, ldo); };
  WithTileRows(na, f);
}

void GemmAmxQ4KUnpacked(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  auto f = [&](auto rows) { GemmAmxQ4K<decltype(rows)::value, true>(n, w, a, a_stride, out, ldo); };
  WithTileRows(na, f);
}

template <Il K>
void GemmAmxAny(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  if (na <= kMaxMultiRows) return g_vnni[static_cast<int>(K)](n, w, a, a_stride, na, out, ldo);
  auto f = [&](auto rows) { GemmAmx<K, decltype(rows)::value>(n, w, a, a_stride, out, ldo); };
  WithTileRows(na, f);
}

template <Il K>
void GemmAmxUnpacked(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  auto f = [&](auto rows) { GemmAmx<K, decltype(rows)::value, true>(n, w, a, a_stride, out, ldo); };
  WithTileRows(na, f);
}

}  // namespace

bool HasAmx() { return true; }

void FillAmx(KernelTable* t) {
  t->isa = Isa::kAmx;
  t->gemm_interleaved_rows = 16;  // a tile's rows
  const TensorType types[3] = {TensorType::kQ4_0, TensorType::kQ5_0, TensorType::kQ8_0};
  for (int i = 0; i < 3; ++i) g_vnni[i] = t->gemm_interleaved[static_cast<uint32_t>(types[i])];
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ4_0)] = GemmAmxAny<Il::kQ4_0>;
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ5_0)] = GemmAmxAny<Il::kQ5_0>;
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ8_0)] = GemmAmxAny<Il::kQ8_0>;
  t->gemm_unpacked[static_cast<uint32_t>(TensorType::kQ4_0)] = {kUnpackedBlockBytes, UnpackAmx<Il::kQ4_0>,
                                                                 GemmAmxUnpacked<Il::kQ4_0>};
  t->gemm_unpacked[static_cast<uint32_t>(TensorType::kQ5_0)] = {kUnpackedBlockBytes, UnpackAmx<Il::kQ5_0>,
                                                                 GemmAmxUnpacked<Il::kQ5_0>};
  g_q4k_vnni = t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ4_K)];
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ4_K)] = GemmAmxQ4KAny;
  // (Per 256 elements: kK4UnpackedBytes / 8 per 32.)
  t->gemm_unpacked[static_cast<uint32_t>(TensorType::kQ4_K)] = {kK4UnpackedBytes / 8, UnpackAmxQ4K, GemmAmxQ4KUnpacked};
}

}  // namespace tandem::kernels::internal

// The AMX kernel table: the AVX-512 table, with the interleaved Q4_0 / Q5_0 / Q8_0 products of 2 to
// 16 activation rows (a tile's rows) (prompts, speculative verification, a server's batch) done by Intel AMX
// tile instructions. Per 32-element block of 16 weight rows: the unpacked weights are an AMX B tile
// as they are (kernels/interleave.h: lane r of chunk c = row r's elements 4c..4c+3), the
// activation rows' quants an A tile read in place, and one TDPBSUD (signed activations x unsigned
// weights) gives every row's integer sum, which a VPDPBUSD loop builds 64 products at a time.
// The sums are exact integers either way and the float step after them is the VNNI kernel's own
// (x86_interleaved.h), so a row gets the same bits from both: one activation row (decode) stays
// on the VNNI kernel, which is bound by memory, not arithmetic.
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

// The AVX-512 table's kernels, for one activation row.
GemmInterleavedFn g_one_row[3];

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
  _tile_loadconfig(&c);
  configured = na;
}

#pragma GCC diagnostic push  // GCC 12's false positive on its own 512-bit intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

template <Il K, int NA>
void GemmAmx(int64_t n, const void* w, const void* a, size_t a_stride, float* out, int64_t ldo) {
  constexpr int kBytes = IlBlock<K>::kBytes;
  Configure(NA);
  const int64_t nb = n / quant::kQK;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const uint8_t* act = static_cast<const uint8_t*>(a) + offsetof(BlockQ8S, qs);
  alignas(64) uint8_t unpacked[2][8 * 64];
  alignas(64) int32_t sums[2][NA * 16];
  __m512 acc[NA];
#pragma GCC unroll 16
  for (int r = 0; r < NA; ++r) acc[r] = _mm512_setzero_ps();
  auto weights = [&](const uint8_t* blk, uint8_t* buf) -> const uint8_t* {
    x86::PrefetchAhead<1, kBytes>(blk);  // a small batch reads each weight once, from memory
    if constexpr (K == Il::kQ8_0) {
      return blk;  // the stored bytes are the tile
    } else {
      __m512i u[8];
      x86::UnpackIl<K>(blk, u);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) _mm512_store_si512(buf + 64 * c, u[c]);
      return buf;
    }
  };
  auto epilogue = [&](int64_t b, const int32_t* s) __attribute__((always_inline)) {
    const __m512 dw = x86::ScalesIl<K>(wb + b * kBytes);
#pragma GCC unroll 16
    for (int r = 0; r < NA; ++r) {
      const BlockQ8S& y = reinterpret_cast<const BlockQ8S*>(static_cast<const uint8_t*>(a) + r * a_stride)[b];
      acc[r] = x86::AddBlockIl<K>(acc[r], _mm512_load_si512(s + 16 * r), y, dw);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {  // two blocks: independent tiles, so their products overlap
    const uint8_t* w0 = weights(wb + b * kBytes, unpacked[0]);
    const uint8_t* w1 = weights(wb + (b + 1) * kBytes, unpacked[1]);
    _tile_zero(0);
    _tile_zero(3);
    _tile_loadd(2, w0, 64);
    _tile_loadd(5, w1, 64);
    _tile_loadd(1, act + b * sizeof(BlockQ8S), static_cast<long>(a_stride));
    _tile_loadd(4, act + (b + 1) * sizeof(BlockQ8S), static_cast<long>(a_stride));
    _tile_dpbsud(0, 1, 2);
    _tile_dpbsud(3, 4, 5);
    _tile_stored(0, sums[0], 64);
    _tile_stored(3, sums[1], 64);
    epilogue(b, sums[0]);  // in block order, as the VNNI kernel adds them
    epilogue(b + 1, sums[1]);
  }
  if (b < nb) {
    _tile_zero(0);
    _tile_loadd(2, weights(wb + b * kBytes, unpacked[0]), 64);
    _tile_loadd(1, act + b * sizeof(BlockQ8S), static_cast<long>(a_stride));
    _tile_dpbsud(0, 1, 2);
    _tile_stored(0, sums[0], 64);
    epilogue(b, sums[0]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < NA; ++r) _mm512_storeu_ps(out + r * ldo, acc[r]);
}

#pragma GCC diagnostic pop

template <Il K>
void GemmAmxAny(int64_t n, const void* w, const void* a, size_t a_stride, int na, float* out, int64_t ldo) {
  if (na == 1) return g_one_row[static_cast<int>(K)](n, w, a, a_stride, 1, out, ldo);
  x86::WithRows<16>(na, [&](auto rows) { GemmAmx<K, decltype(rows)::value>(n, w, a, a_stride, out, ldo); });
}

}  // namespace

bool HasAmx() { return true; }

void FillAmx(KernelTable* t) {
  t->isa = Isa::kAmx;
  t->gemm_interleaved_rows = 16;  // a tile's rows
  const TensorType types[3] = {TensorType::kQ4_0, TensorType::kQ5_0, TensorType::kQ8_0};
  for (int i = 0; i < 3; ++i) g_one_row[i] = t->gemm_interleaved[static_cast<uint32_t>(types[i])];
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ4_0)] = GemmAmxAny<Il::kQ4_0>;
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ5_0)] = GemmAmxAny<Il::kQ5_0>;
  t->gemm_interleaved[static_cast<uint32_t>(TensorType::kQ8_0)] = GemmAmxAny<Il::kQ8_0>;
}

}  // namespace tandem::kernels::internal

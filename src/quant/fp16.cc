// Half-precision conversions, done on the bit patterns so that the results do not depend on the
// compiler, the floating-point environment or the CPU's own conversion instructions.

#include <cstring>

#include "quant/quant.h"

namespace tandem::quant {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return BitsFloat(sign | 0x7F800000u | (mant << 13));  // inf, NaN (payload kept)
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return BitsFloat(sign);  // signed zero
  // Subnormal: mant * 2^-24. Shift the leading one into the implicit position.
  int e = 113;  // biased float exponent of 2^-14
  while ((mant & 0x400) == 0) {
    mant <<= 1;
    --e;
  }
  return BitsFloat(sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3FF) << 13));
}

uint16_t Fp32ToFp16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7FFFFFFF;
  if (abs >= 0x7F800000) {  // inf or NaN; a NaN keeps its top payload bits and stays a NaN
    if (abs == 0x7F800000) return sign | 0x7C00;
    uint16_t m = static_cast<uint16_t>((abs >> 13) & 0x3FF);
    return sign | 0x7C00 | (m != 0 ? m : 0x200);
  }
  if (abs >= 0x477FF000) return sign | 0x7C00;  // >= 65520 rounds (to even) past 65504: infinity
  const uint32_t e = abs >> 23;
  if (e < 113) {  // below 2^-14: a half subnormal (or zero); unit 2^-24
    const uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;  // value / 2^-24 = mant >> shift
    if (shift > 24)
      return sign;  // under a quarter of the smallest subnormal (or a float subnormal)
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;  // may carry into the smallest normal: right
    return sign | static_cast<uint16_t>(q);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even. A carry out of
  // the mantissa correctly bumps the exponent.
  uint32_t h = ((e - 112) << 10) | ((abs >> 13) & 0x3FF);
  const uint32_t rem = abs & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

float Bf16ToFp32(uint16_t h) {
  return BitsFloat(uint32_t{h} << 16);
}

uint16_t Fp32ToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  // Round to nearest even; overflow correctly becomes infinity.
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

}  // namespace tandem::quant

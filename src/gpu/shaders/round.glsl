// How the CPU's products quantize activations before their integer dot products (and as
// llama.cpp does), as values: per block of ROUND_BLOCK (32 for Q8_0, whose scale d = amax / 127
// is stored as F16; 256 with -DROUND_Q8_K, d = amax / 127 as F32) a value x becomes
// d * clamp(round_half_even(x / d), -127, 127). act_round.comp rounds a buffer; rmsnorm.comp and
// act_mul.comp round what they write when built with -DROUND_Q8_0 or -DROUND_Q8_K, through these
// same functions, so every rounding of a value gives the same bits.
#if defined(ROUND_Q8_K)
#define ROUND_BLOCK 256
#else
#define ROUND_BLOCK 32
#endif

// The scale d of a block whose largest magnitude is amax, and the factor id that divides by it
// (0 for a block of zeros).
void RoundScale(float amax, out float d, out float id) {
#if defined(ROUND_Q8_K)
  d = amax / 127.0;
  id = amax > 0.0 ? 127.0 / amax : 0.0;
#else
  d = unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
  id = d != 0.0 ? 1.0 / d : 0.0;
#endif
}

float RoundTo(float v, float d, float id) { return d * clamp(roundEven(v * id), -127.0, 127.0); }

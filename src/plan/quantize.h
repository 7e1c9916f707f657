// Internal: the one scalar definition of rotary's quantised storage (int8 rows with a scale, fp8 e4m3/e5m2 with a per-tensor scale).
//
// These functions ARE the documented rounding rules (docs/prologue.md, "Quantised storage"): the reference
// kernel stores with them, the SIMD encoders in src/cpu/quantize-inl.h are tested bit for bit against
// them, and the tests check both against an independent encoder (ml_dtypes, numpy).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "rotary/types.h"

namespace rotary::detail {

inline uint32_t f32_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

inline float bits_f32(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

/// Largest finite value of an fp8 format: 448 (e4m3fn), 57344 (e5m2).
inline float fp8_max(DType dt) { return dt == DType::kF8E4M3 ? 448.0f : 57344.0f; }

/// f32 -> fp8 bits, saturating: |v| beyond the largest finite value (infinities included) becomes that
/// value with v's sign; everything else rounds to the nearest fp8 value, ties to even (subnormals
/// included); NaN stays NaN (0x7F / 0xFF for e4m3fn, 0x7E / 0xFE for e5m2).
inline uint8_t f32_to_fp8(float v, DType dt) {
  const bool e4m3 = dt == DType::kF8E4M3;
  const uint32_t u = f32_bits(v);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if (std::isnan(v)) return static_cast<uint8_t>(sign | (e4m3 ? 0x7Fu : 0x7Eu));
  float a = std::fabs(v);
  const float mx = fp8_max(dt);
  if (a > mx) a = mx;
  const uint32_t ab = f32_bits(a);
  // Below the smallest normal (2^-6 e4m3, 2^-14 e5m2): a multiple of the subnormal step (2^-9, 2^-16),
  // rounded by the FPU (nearest, ties to even); the result 8 (e4m3) / 4 (e5m2) is the smallest normal's code.
  if (e4m3 ? ab < 0x3C800000u : ab < 0x38800000u)
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(a * (e4m3 ? 512.0f : 65536.0f))));
  // Normal: round the f32 mantissa to 3 (e4m3) / 2 (e5m2) bits, ties to even, then rebias the exponent.
  const int shift = e4m3 ? 20 : 21;
  const uint32_t r = ab + ((1u << (shift - 1)) - 1u) + ((ab >> shift) & 1u);
  const uint32_t code = (r >> shift) - (e4m3 ? (120u << 3) : (112u << 2));
  return static_cast<uint8_t>(sign | code);
}

/// fp8 bits -> f32 (exact).
inline float fp8_to_f32(uint8_t b, DType dt) {
  const bool e4m3 = dt == DType::kF8E4M3;
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t mbits = e4m3 ? 3u : 2u;
  const uint32_t e = (b & 0x7Fu) >> mbits, m = b & ((1u << mbits) - 1u);
  float mag;
  if (e4m3 && (b & 0x7Fu) == 0x7Fu) {
    mag = std::nanf("");
  } else if (!e4m3 && e == 31u) {
    mag = m == 0 ? INFINITY : std::nanf("");
  } else if (e == 0) {
    mag = std::ldexp(static_cast<float>(m), e4m3 ? -9 : -16);
  } else {
    const uint32_t bias = e4m3 ? 7u : 15u;
    mag = bits_f32(((e - bias + 127u) << 23) | (m << (23u - mbits)));
  }
  return bits_f32(f32_bits(mag) | sign);
}

/// The value written for y into an fp8 tensor whose per-tensor scale is `scale` (> 0, finite):
/// f32_to_fp8(fl32(y / scale)). Dequantised: fp8_to_f32(bits) * scale.
inline uint8_t quantize_fp8(float y, float scale, DType dt) { return f32_to_fp8(y / scale, dt); }

/// int8 row quantisation, symmetric with one scale per row (a (token, head) row of the KV cache):
///   amax = max |y_i| (NaN if any y_i is NaN);  scale = fl32(amax / 127);
///   q_i = clamp(round_half_even(fl32(y_i / scale)), -127, 127)   when scale is finite and > 0,
///   q_i = 0 otherwise (an all-zero row, a row holding an infinity or NaN, or amax below 127 * 2^-150).
/// Dequantised: q_i * scale. Writes the row to q and returns its scale.
inline float quantize_int8_row(const float* y, int64_t n, int8_t* q) {
  float amax = 0.0f;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    nan = nan || std::isnan(y[i]);
    amax = std::fmax(amax, std::fabs(y[i]));
  }
  const float scale = nan ? std::nanf("") : amax / 127.0f;
  const bool usable = std::isfinite(scale) && scale > 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float r = usable ? std::nearbyint(y[i] / scale) : 0.0f;
    r = std::fmin(127.0f, std::fmax(-127.0f, r));
    q[i] = static_cast<int8_t>(r);
  }
  return scale;
}

}  // namespace rotary::detail

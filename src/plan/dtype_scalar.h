// Internal: scalar load/store of every dtype (one rounding on store) and the one index reader (plan, engine, backends).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "rotary/types.h"

namespace rotary::detail {

inline float bf16_to_f32(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// _Float16 is used where the compiler supports it on the target (GCC >= 12, clang >= 15 on x86-64);
// otherwise (e.g. clang 14, used by the fuzz preset) an exact software conversion with the same results.
#if defined(__clang__) && __clang_major__ < 15
#define ROTARY_HAS_FLOAT16 0
#elif defined(__FLT16_MANT_DIG__)
#define ROTARY_HAS_FLOAT16 1
#else
#define ROTARY_HAS_FLOAT16 0
#endif

inline float f16_to_f32(uint16_t bits) {
#if ROTARY_HAS_FLOAT16
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
#else
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1Fu, mant = bits & 0x3FFu;
  uint32_t u;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&u, &mag, 4);
    u |= sign;
  } else if (exp == 31) {  // inf / NaN (payload kept, quiet bit as given)
    u = sign | 0x7F800000u | (mant << 13);
  } else {
    u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// double -> float with round-to-odd: exact when representable, else the truncated value with its
/// last bit forced to 1. Rounding that result again to <= 22 significant bits (bf16, f16) then
/// gives the same answer as a single round-to-nearest-even from the double.
inline float round_to_odd_f32(double x) {
  float f = static_cast<float>(x);
  if (std::isnan(x) || static_cast<double>(f) == x) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);  // truncate
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= 1u;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f32 -> bf16, round-to-nearest-even (NaN stays NaN).
inline uint16_t f32_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// f32 -> f16, round-to-nearest-even (overflow to inf, subnormals, NaN stays NaN).
inline uint16_t f32_to_f16(float x) {
#if ROTARY_HAS_FLOAT16
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // NaN, quieted
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 (or inf): inf
  if (a >= 0x38800000u) {  // normal f16 range (>= 2^-14): round the 13 dropped bits to nearest even
    a += 0xFFFu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((a - 0x38000000u) >> 13));
  }
  float mag;  // subnormal or zero: round |x| * 2^24 (exact scaling) to an integer, ties to even
  std::memcpy(&mag, &a, 4);
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(mag * 16777216.0f)));
#endif
}

/// Element `idx` (in elements) of a floating buffer, widened to double.
inline double load_as_double(const void* base, DType dt, int64_t idx) {
  switch (dt) {
    case DType::kF32: return static_cast<const float*>(base)[idx];
    case DType::kF64: return static_cast<const double*>(base)[idx];
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(base)[idx]);
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[idx]);
    default: return 0.0;
  }
}

/// Element `idx` of an integer index buffer (positions, batch offsets, cu_seqlens) of dtype i32 or i64, exactly.
inline int64_t load_int_index(const void* base, DType dt, int64_t idx) {
  return dt == DType::kI32 ? static_cast<const int32_t*>(base)[idx] : static_cast<const int64_t*>(base)[idx];
}

/// Element `idx` of a position buffer of dtype i32, i64, f32 or f64 (fractional positions), as a double.
inline double load_index(const void* base, DType dt, int64_t idx) {
  if (dt == DType::kI32) return static_cast<const int32_t*>(base)[idx];
  if (dt == DType::kI64) return static_cast<double>(static_cast<const int64_t*>(base)[idx]);
  return load_as_double(base, dt, idx);
}

/// Stores `v` rounded once (round-to-nearest-even) to `dt`.
inline void store_from_double(void* base, DType dt, int64_t idx, double v) {
  switch (dt) {
    case DType::kF32: static_cast<float*>(base)[idx] = static_cast<float>(v); break;
    case DType::kF64: static_cast<double*>(base)[idx] = v; break;
    case DType::kF16: static_cast<uint16_t*>(base)[idx] = f32_to_f16(round_to_odd_f32(v)); break;
    case DType::kBF16: static_cast<uint16_t*>(base)[idx] = f32_to_bf16(round_to_odd_f32(v)); break;
    default: break;
  }
}

}  // namespace rotary::detail

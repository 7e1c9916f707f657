// Internal: scalar load/store of every floating dtype with exactly one rounding on store (engine + reference).
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

inline float f16_to_f32(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
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

inline uint16_t f32_to_f16(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
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

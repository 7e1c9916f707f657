// Host/device shim: the kernel bodies compile with nvcc for the GPU and with the ordinary C++ compiler for the grid emulator.
//
// Only three things differ between the two: the function qualifiers, 16-byte vector memory accesses
// (uint4 on the device; memcpy plus an alignment check in the emulator, which throws where the device
// would fault), and the f16/bf16 conversions and double sin/cos (hardware instructions and CUDA's libdevice
// on the device; bit-exact IEEE round-to-nearest-even and glibc on the host). Everything else in the
// bodies (indexing, tiling, vector width, tails) is the same source on both.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define ROTARY_HD __host__ __device__ __forceinline__
#define ROTARY_UNROLL _Pragma("unroll")
#else
#include <stdexcept>
#define ROTARY_HD inline
#define ROTARY_UNROLL
#endif

namespace rotary::detail::cuda {

/// 16 bytes moved by one vector load or store (one uint4 on the device).
struct alignas(16) Pack16 {
  uint32_t w[4];
};

ROTARY_HD Pack16 load16(const void* p) {
#if defined(__CUDA_ARCH__)
  const uint4 v = *static_cast<const uint4*>(p);
  Pack16 r;
  r.w[0] = v.x;
  r.w[1] = v.y;
  r.w[2] = v.z;
  r.w[3] = v.w;
  return r;
#else
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) throw std::logic_error("misaligned 16-byte vector load");
  Pack16 r;
  std::memcpy(r.w, p, 16);
  return r;
#endif
}

ROTARY_HD void store16(void* p, const Pack16& v) {
#if defined(__CUDA_ARCH__)
  *static_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
#else
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) throw std::logic_error("misaligned 16-byte vector store");
  std::memcpy(p, v.w, 16);
#endif
}

ROTARY_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

ROTARY_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

ROTARY_HD float quiet_nan() { return bits_f32(0x7FC00000u); }

ROTARY_HD float bf16_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

/// Round to nearest even (NaN stays NaN).
ROTARY_HD uint16_t f32_to_bf16(float x) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
#else
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
#endif
}

ROTARY_HD float f16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in f32
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7F800000u | (man << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
#endif
}

/// Round to nearest even, overflow to infinity, subnormals kept (NaN stays NaN).
ROTARY_HD uint16_t f32_to_f16(float x) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(x));
#else
  const uint32_t u = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds to infinity
  if (a < 0x38800000u) {  // below 2^-14: subnormal (or zero); the product is exact, nearbyint rounds to even
    const float m = std::nearbyint(bits_f32(a) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(m));
  }
  uint32_t h = (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3FFu);
  const uint32_t rest = a & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct
  return static_cast<uint16_t>(sign | h);
#endif
}

/// cos and sin of a double angle (CUDA: libdevice's full-range sincos; host: glibc).
ROTARY_HD void sincos_f64(double angle, double* s, double* c) {
#if defined(__CUDA_ARCH__)
  sincos(angle, s, c);
#else
  *s = std::sin(angle);
  *c = std::cos(angle);
#endif
}

ROTARY_HD float fma_f32(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

ROTARY_HD double floor_f64(double x) {
#if defined(__CUDA_ARCH__)
  return floor(x);
#else
  return std::floor(x);
#endif
}

}  // namespace rotary::detail::cuda

// Test helpers of the prologue family: a small call builder and the fp64 truth (norm -> rotate) written from the formulas.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <hwy/targets.h>

#include <functional>
#include <string>

#include "cpu/kernels.h"
#include "plan/dtype_scalar.h"
#include "plan/quantize.h"
#include "rotary/rotary.h"
#include "rotary/prologue.h"

namespace rotary::testing {

/// Raw storage of `n` elements of `dtype`, filled from N(0, 1) values rounded to the dtype (8-bit types: zero).
struct Buf {
  DType dtype = DType::kF32;
  std::vector<unsigned char> bytes;
  Buf() = default;
  Buf(DType dt, int64_t n, uint32_t seed = 0, double sigma = 1.0) : dtype(dt), bytes(static_cast<size_t>(n) * dtype_size(dt)) {
    if (seed == 0 || !is_floating(dt)) return;
    std::mt19937 g(seed);
    std::normal_distribution<double> nd(0.0, sigma);
    for (int64_t i = 0; i < n; ++i) detail::store_from_double(bytes.data(), dt, i, nd(g));
  }
  void* data() { return bytes.data(); }
  int64_t size() const { return static_cast<int64_t>(bytes.size() / dtype_size(dtype)); }
  double at(int64_t i) const { return detail::load_as_double(bytes.data(), dtype, i); }
  TensorView view(std::initializer_list<int64_t> shape) { return TensorView::contiguous(data(), dtype, shape); }
};

/// The cos/sin of position `pos` in double (attention factor folded in), from the core's double frequencies.
inline void truth_cos_sin(const Frequencies& f, double pos, std::vector<double>* c, std::vector<double>* s) {
  c->resize(f.inv_freq.size());
  s->resize(f.inv_freq.size());
  for (size_t j = 0; j < f.inv_freq.size(); ++j) {
    (*c)[j] = std::cos(pos * f.inv_freq[j]) * f.attention_factor;
    (*s)[j] = std::sin(pos * f.inv_freq[j]) * f.attention_factor;
  }
}

/// fp64 truth of one head row: RMSNorm (w: weight + offset, or empty), then rotation of the first 2*c.size() channels.
inline std::vector<double> truth_row(std::vector<double> x, const std::vector<double>& w, double eps, Pairing pairing,
                                     const std::vector<double>& c, const std::vector<double>& s) {
  const auto D = static_cast<int64_t>(x.size());
  if (!w.empty()) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
    for (int64_t i = 0; i < D; ++i) x[static_cast<size_t>(i)] *= r * w[static_cast<size_t>(i)];
  }
  const auto h = static_cast<int64_t>(c.size());
  for (int64_t j = 0; j < h; ++j) {
    const int64_t i0 = pairing == Pairing::kHalfSplit ? j : 2 * j, i1 = pairing == Pairing::kHalfSplit ? j + h : 2 * j + 1;
    const double x0 = x[static_cast<size_t>(i0)], x1 = x[static_cast<size_t>(i1)];
    x[static_cast<size_t>(i0)] = x0 * c[static_cast<size_t>(j)] - x1 * s[static_cast<size_t>(j)];
    x[static_cast<size_t>(i1)] = x0 * s[static_cast<size_t>(j)] + x1 * c[static_cast<size_t>(j)];
  }
  return x;
}

/// Value of element `i` of a cache row (dequantised with its row scale / tensor scale).
inline double cache_value(const Buf& cache, int64_t i, double scale) {
  if (cache.dtype == DType::kI8) return static_cast<int8_t>(cache.bytes[static_cast<size_t>(i)]) * scale;
  if (is_fp8(cache.dtype)) return detail::fp8_to_f32(cache.bytes[static_cast<size_t>(i)], cache.dtype) * scale;
  return cache.at(i);
}

/// Allowed |stored - truth| for a value of magnitude `mag` stored as `dtype` (row scale `scale` for i8):
/// one rounding of the dtype (half an ulp at `mag`, relative 2^-24 / 2^-11 / 2^-8 / 2^-4 / 2^-3) or half a
/// quantisation step (i8: scale / 2; fp8 subnormals: half the subnormal step times the scale), plus the f32
/// computation's error (4e-6 of the row's magnitude, the accuracy contract) that the rounding may amplify
/// by one step at a tie.
inline double stored_tol(DType dtype, double mag, double row_mag, double scale) {
  const double f32_part = 4e-6 * std::max(1.0, row_mag);
  switch (dtype) {
    case DType::kF32: return f32_part;
    case DType::kF16: return std::max(mag * std::ldexp(1.0, -11), std::ldexp(1.0, -25)) + f32_part;
    case DType::kBF16: return mag * std::ldexp(1.0, -8) + f32_part;
    case DType::kI8: return scale * 0.5 * (1 + 1e-6) + f32_part;
    case DType::kF8E4M3: return std::max(mag * std::ldexp(1.0, -4), std::ldexp(1.0, -10) * scale) * (1 + 1e-6) + f32_part;
    case DType::kF8E5M2: return std::max(mag * std::ldexp(1.0, -3), std::ldexp(1.0, -17) * scale) * (1 + 1e-6) + f32_part;
    default: return 0.0;
  }
}

/// Runs fn(name) once per Highway target this CPU runs (best first), and once more on the best target with
/// AVX512-BF16 narrowing off when the CPU has it ("AVX3 portable bf16"); restores the defaults after.
inline void for_each_target(const std::function<void(const std::string&)>& fn) {
  for (int64_t target : detail::cpu::runnable_targets()) {
    hwy::SetSupportedTargetsForTest(target);
    fn(hwy::TargetName(target));
  }
  hwy::SetSupportedTargetsForTest(0);
  if (detail::cpu::set_native_bf16(true)) {  // (true where the CPU has AVX512-BF16)
    detail::cpu::set_native_bf16(false);
    fn("portable bf16");
  }
  detail::cpu::set_native_bf16(true);
}

}  // namespace rotary::testing

// Engine test support: strided test tensors in any layout/dtype and an independent long-double RoPE truth.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "rotary/rotary.h"
#include "testing/shared.h"

namespace rotary::enginetest {

/// A tensor of logical shape (B, S, H, D) stored in `layout` order with `pad` extra channels
/// after each head vector (so pad > 0 gives a non-contiguous view). Padding bytes hold a
/// sentinel so tests can verify nothing outside the view is written.
class TestTensor {
 public:
  TestTensor(DType dtype, Layout layout, int64_t B, int64_t S, int64_t H, int64_t D, int64_t pad = 0)
      : dtype_(dtype), layout_(layout), B_(B), S_(S), H_(H), D_(D) {
    const int64_t row = D + pad;
    const std::size_t es = dtype_size(dtype);
    bytes_.assign(static_cast<std::size_t>(B * S * H * row) * es + es, 0xA5);  // +es: never zero-sized
    void* p = bytes_.data();
    switch (layout) {
      case Layout::kBSHD:
        view_ = TensorView::strided(p, dtype, {B, S, H, D}, {S * H * row, H * row, row, 1});
        sb_ = S * H * row; ss_ = H * row; sh_ = row;
        break;
      case Layout::kBHSD:
        view_ = TensorView::strided(p, dtype, {B, H, S, D}, {H * S * row, S * row, row, 1});
        sb_ = H * S * row; ss_ = row; sh_ = S * row;
        break;
      case Layout::kTHD:
        view_ = TensorView::strided(p, dtype, {S, H, D}, {H * row, row, 1});
        sb_ = 0; ss_ = H * row; sh_ = row;
        break;
    }
  }

  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  const std::vector<unsigned char>& bytes() const { return bytes_; }
  int64_t B() const { return B_; }
  int64_t S() const { return S_; }
  int64_t H() const { return H_; }
  int64_t D() const { return D_; }
  DType dtype() const { return dtype_; }

  int64_t index(int64_t b, int64_t s, int64_t h, int64_t d) const { return b * sb_ + s * ss_ + h * sh_ + d; }

  double get(int64_t b, int64_t s, int64_t h, int64_t d) const {
    const int64_t i = index(b, s, h, d);
    const void* p = bytes_.data();
    switch (dtype_) {
      case DType::kF32: return static_cast<const float*>(p)[i];
      case DType::kF64: return static_cast<const double*>(p)[i];
      case DType::kF16: return testing::f16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
      case DType::kBF16: return testing::bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
      default: return 0;
    }
  }

  /// Stores a value (f16/bf16: rounded to nearest even from its f32 value).
  void set(int64_t b, int64_t s, int64_t h, int64_t d, double v) {
    const int64_t i = index(b, s, h, d);
    void* p = bytes_.data();
    switch (dtype_) {
      case DType::kF32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
      case DType::kF64: static_cast<double*>(p)[i] = v; break;
      case DType::kF16: static_cast<uint16_t*>(p)[i] = testing::f32_to_f16_bits(static_cast<float>(v)); break;
      case DType::kBF16: static_cast<uint16_t*>(p)[i] = testing::f32_to_bf16_bits(static_cast<float>(v)); break;
      default: break;
    }
  }

  void fill_randn(uint64_t seed) {
    const auto v = testing::randn_f64(static_cast<std::size_t>(B_ * S_ * H_ * D_), seed);
    std::size_t k = 0;
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t s = 0; s < S_; ++s)
        for (int64_t h = 0; h < H_; ++h)
          for (int64_t d = 0; d < D_; ++d) set(b, s, h, d, v[k++]);
  }

  /// Head vector (b, s, h) as doubles.
  std::vector<double> head(int64_t b, int64_t s, int64_t h) const {
    std::vector<double> x(static_cast<std::size_t>(D_));
    for (int64_t d = 0; d < D_; ++d) x[static_cast<std::size_t>(d)] = get(b, s, h, d);
    return x;
  }

  /// Bytes of the element (b, s, h, d) (for bit-exact pass-through checks).
  uint64_t raw(int64_t b, int64_t s, int64_t h, int64_t d) const {
    uint64_t r = 0;
    std::memcpy(&r, bytes_.data() + index(b, s, h, d) * static_cast<int64_t>(dtype_size(dtype_)), dtype_size(dtype_));
    return r;
  }

  /// True if every byte outside the view's elements still holds the sentinel.
  bool padding_intact() const {
    std::vector<bool> inside(bytes_.size(), false);
    const std::size_t es = dtype_size(dtype_);
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t s = 0; s < S_; ++s)
        for (int64_t h = 0; h < H_; ++h)
          for (int64_t d = 0; d < D_; ++d)
            for (std::size_t k = 0; k < es; ++k) inside[static_cast<std::size_t>(index(b, s, h, d)) * es + k] = true;
    for (std::size_t i = 0; i < bytes_.size(); ++i)
      if (!inside[i] && bytes_[i] != 0xA5) return false;
    return true;
  }

 private:
  DType dtype_;
  Layout layout_;
  int64_t B_, S_, H_, D_;
  int64_t sb_ = 0, ss_ = 0, sh_ = 0;
  std::vector<unsigned char> bytes_;
  TensorView view_;
};

/// theta_i = base^(-2i/R) in long double (independent of the library's frequency code).
inline std::vector<long double> truth_theta(long double base, int64_t rotary_dim) {
  std::vector<long double> t(static_cast<std::size_t>(rotary_dim / 2));
  for (std::size_t i = 0; i < t.size(); ++i)
    t[i] = powl(base, -static_cast<long double>(2 * i) / static_cast<long double>(rotary_dim));
  return t;
}

inline Frequencies to_frequencies(const std::vector<long double>& theta, double attention_factor = 1.0) {
  Frequencies f;
  for (long double t : theta) f.inv_freq.push_back(static_cast<double>(t));
  f.attention_factor = attention_factor;
  return f;
}

/// Rotates one head vector x (length D) with given per-frequency cos/sin (long double);
/// channels >= R are copied. The literal definition, written independently of the library.
inline std::vector<double> truth_rotate_cs(const std::vector<double>& x, int64_t R, Pairing pairing, Direction dir,
                                           const std::vector<long double>& c, const std::vector<long double>& s) {
  std::vector<double> y = x;
  const int64_t h = R / 2;
  for (int64_t j = 0; j < h; ++j) {
    const int64_t i0 = pairing == Pairing::kHalfSplit ? j : 2 * j;
    const int64_t i1 = pairing == Pairing::kHalfSplit ? j + h : 2 * j + 1;
    const long double x0 = x[static_cast<std::size_t>(i0)], x1 = x[static_cast<std::size_t>(i1)];
    const long double cj = c[static_cast<std::size_t>(j)];
    const long double sj = dir == Direction::kForward ? s[static_cast<std::size_t>(j)] : -s[static_cast<std::size_t>(j)];
    y[static_cast<std::size_t>(i0)] = static_cast<double>(x0 * cj - x1 * sj);
    y[static_cast<std::size_t>(i1)] = static_cast<double>(x0 * sj + x1 * cj);
  }
  return y;
}

/// Exact rotation: angle_j = pos_of_freq(j) * theta_j in long double, times attention factor.
inline std::vector<double> truth_rotate(const std::vector<double>& x, int64_t R, Pairing pairing, Direction dir,
                                        const std::vector<long double>& theta, long double af,
                                        const std::function<long double(int64_t)>& pos_of_freq) {
  std::vector<long double> c(theta.size()), s(theta.size());
  for (std::size_t j = 0; j < theta.size(); ++j) {
    const long double a = pos_of_freq(static_cast<int64_t>(j)) * theta[j];
    c[j] = cosl(a) * af;
    s[j] = sinl(a) * af;
  }
  return truth_rotate_cs(x, R, pairing, dir, c, s);
}

/// One unit in the last place of `dtype` at magnitude |v| (normal range).
inline double ulp(DType dtype, double v) {
  int mant = 23;
  double min_ulp = std::ldexp(1.0, -149);
  switch (dtype) {
    case DType::kF64: mant = 52; min_ulp = std::ldexp(1.0, -1074); break;
    case DType::kF32: mant = 23; min_ulp = std::ldexp(1.0, -149); break;
    case DType::kF16: mant = 10; min_ulp = std::ldexp(1.0, -24); break;
    case DType::kBF16: mant = 7; min_ulp = std::ldexp(1.0, -133); break;
    default: break;
  }
  const double a = std::fabs(v);
  if (a == 0) return min_ulp;
  return std::max(min_ulp, std::ldexp(1.0, std::ilogb(a) - mant));
}

}  // namespace rotary::enginetest

// Test vectors for the report: seeded random data, dot products, and rotation through rotary's f32 kernel.
#include "vectors.h"

#include <cmath>
#include <random>

#include "rotary/apply.h"

namespace rotary::cli::report {

std::vector<float> random_normal(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

void normalize(std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  const float inv = float(1.0 / std::sqrt(s));
  for (auto& x : v) x *= inv;
}

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
  return s;
}

void rotate_ids(const Frequencies& f, Pairing pairing, std::vector<float>& x, int64_t T, int64_t H, int64_t D,
                const std::vector<int64_t>& ids) {
  ApplyArgs a;
  a.q = TensorView::contiguous(x.data(), DType::kF32, {T, H, D});
  a.layout = Layout::kTHD;
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {T}));
  a.pairing = pairing;
  a.threads = 1;
  apply_frequencies(f, a);
}

}  // namespace rotary::cli::report

// Downstream smoke test: a Llama-3.1-8B decode step through the installed rotary library, checked against fp64 math.
#include <rotary/rotary.h>

#ifdef ROTARY_CONSUMER_CXX17  // rotary::rotary's usage requirements must leave a C++17 consumer at C++17
static_assert(__cplusplus == 201703L, "the consumer asked for C++17 and got another standard");
#endif

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  rotary::Rope rope(rotary::preset("llama-3.1-8b"));
  const int64_t heads = 8, dim = 128, pos = 12345;
  std::vector<float> q(heads * dim), ref(heads * dim);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37 * double(i));
  rotary::ApplyArgs args;
  args.q = rotary::TensorView::contiguous(q.data(), rotary::DType::kF32, {1, 1, heads, dim});
  args.positions = rotary::Positions::contiguous(pos);
  auto freqs = rope.frequencies();
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < dim / 2; ++i) {
      double a = double(pos) * freqs.inv_freq[i], x0 = q[h * dim + i], x1 = q[h * dim + i + dim / 2];
      ref[h * dim + i] = float(x0 * std::cos(a) - x1 * std::sin(a));
      ref[h * dim + i + dim / 2] = float(x0 * std::sin(a) + x1 * std::cos(a));
    }
  rope.apply(args);
  double err = 0;
  for (size_t i = 0; i < q.size(); ++i) err = std::fmax(err, std::fabs(double(q[i]) - ref[i]));
  std::printf("consumer: max abs error %.3g\n", err);
  return err < 4e-6 ? 0 : 1;
}

// The SIMD kernels' f32 -> bf16 narrowing against the round-to-nearest-even rule on every lower half of every edge exponent, per target.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "prologue/prologue_testing.h"

namespace rotary {
namespace {

/// The bf16 of f32 bits u: round to nearest even; NaN keeps its payload's upper half with the quiet bit set.
uint16_t bf16_rne(uint32_t u) {
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) return static_cast<uint16_t>((u | 0x00400000u) >> 16);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/// A bf16 row whose pairs are (1, 0), rotated by a caller table whose cos holds the f32 values under test and
/// whose sin is 0, gives each value back in the pair's first channel, rounded by the kernel's narrowing
/// (1 * c - 0 * 0 = c exactly). The values: every lower half (65 536) under upper halves at the edges that
/// matter — sign, zero / subnormal, ordinary, the largest finite and the inf / NaN exponents, with the bf16
/// mantissa even and odd, all zeros and all ones (the carry runs into the exponent) — 7 million values, so
/// every tie and near-tie of each. Lower halves 0x8000 (ties) and 0xFFFF (a carry that a non-saturating 16-bit
/// add would lose) are among them. Rows of head_dim 128 on 64-byte lines take the register rows (on targets
/// without AVX512-BF16: half-split ones in the bf16 block order on x86, StoreBF16BlocksTwice; interleaved ones
/// as pairs in 32-bit lanes, NonNaNBF16PairWords), rows one element off a line the general rows.
TEST(Bf16Narrowing, EveryLowerHalfAtEveryEdgeExponentRoundsToNearestEvenOnEveryTargetAndPairing) {
  constexpr int64_t D = 128, h = D / 2;
  std::vector<uint16_t> uppers;
  for (uint32_t sign : {0u, 1u})
    for (uint32_t exponent : {0u, 1u, 2u, 0x7Eu, 0x7Fu, 0x80u, 0xFDu, 0xFEu, 0xFFu})
      for (uint32_t mantissa : {0x00u, 0x01u, 0x3Fu, 0x40u, 0x7Eu, 0x7Fu})
        uppers.push_back(static_cast<uint16_t>(sign << 15 | exponent << 7 | mantissa));
  const int64_t T = static_cast<int64_t>(uppers.size()) * 65536 / h;  // one table row per 64 values
  std::vector<float> cos(static_cast<size_t>(T * h)), sin(cos.size(), 0.0f);
  std::vector<uint16_t> want(cos.size());
  for (size_t u = 0; u < uppers.size(); ++u)
    for (uint32_t lower = 0; lower < 65536; ++lower) {
      const uint32_t bits = static_cast<uint32_t>(uppers[u]) << 16 | lower;
      const size_t i = u * 65536 + lower;
      std::memcpy(&cos[i], &bits, 4);
      want[i] = bf16_rne(bits);
    }
  std::vector<uint16_t> storage(static_cast<size_t>(T * D + 64));
  const size_t line = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64 / sizeof(uint16_t);
  auto check = [&](size_t misalign, Pairing pairing) {
    uint16_t* q = storage.data() + line + misalign;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < D; ++i)  // bf16 1 and 0: each pair's first value 1
        q[t * D + i] = (pairing == Pairing::kHalfSplit ? i < h : i % 2 == 0) ? 0x3F80 : 0;
    ApplyArgs a;
    a.q = TensorView::contiguous(q, DType::kBF16, {T, 1, D});
    a.layout = Layout::kTHD;
    a.pairing = pairing;
    a.backend = Backend::kCpu;
    a.threads = 1;
    apply_cos_sin(TensorView::contiguous(cos.data(), DType::kF32, {T, h}),
                  TensorView::contiguous(sin.data(), DType::kF32, {T, h}), a);
    int64_t wrong = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < h; ++i) {
        const size_t v = static_cast<size_t>(t * h + i);
        const uint16_t got = q[t * D + (pairing == Pairing::kHalfSplit ? i : 2 * i)];
        if (got != want[v] && wrong++ < 8) {
          uint32_t bits;
          std::memcpy(&bits, &cos[v], 4);
          ADD_FAILURE() << "f32 bits 0x" << std::hex << bits << ": want bf16 0x" << want[v] << ", got 0x" << got;
        }
      }
    EXPECT_EQ(wrong, 0);
  };
  testing::for_each_target([&](const std::string& target) {
    // Rows on 64-byte lines (the register rows) and one element past (the general rows).
    for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
      for (size_t misalign : {size_t{0}, size_t{1}}) {
        SCOPED_TRACE(target + (pairing == Pairing::kHalfSplit ? " half-split" : " interleaved") +
                     (misalign ? " misaligned" : " aligned"));
        check(misalign, pairing);
      }
  });
}

}  // namespace
}  // namespace rotary

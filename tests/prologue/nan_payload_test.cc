// Special values through the prologue's writers on every target: NaNs of every payload stay NaN in bf16 outputs; infinities, zeros and subnormals keep their class.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plan/quantize.h"
#include "prologue/prologue_testing.h"
#include "testing/shared.h"

namespace rotary {
namespace {

using testing::Buf;

/// f32 NaNs whose low 16 bits carry into the sign or exponent if rounded to bf16 as finite values
/// (bits + 0x7FFF + lsb): an all-ones payload becomes -0 or +0 that way, 0x7F800001 infinity.
const uint32_t kNaNs[] = {0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FBFFFFFu, 0xFFFF8001u, 0x7FC0FFFFu};

float nan_bits(uint32_t u) { return detail::bits_f32(u); }

bool is_bf16_nan(uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

int64_t count_nans(const std::vector<uint16_t>& bf16) {
  int64_t n = 0;
  for (uint16_t b : bf16) n += is_bf16_nan(b);
  return n;
}

/// bf16 `got` is NaN wherever `want` is; elsewhere `finite(i)` checks element i.
template <class Finite>
void expect_nans_kept(const std::vector<uint16_t>& want, const std::vector<uint16_t>& got, Finite finite) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (is_bf16_nan(want[i])) {
      ASSERT_TRUE(is_bf16_nan(got[i])) << "element " << i << ": 0x" << std::hex << got[i];
    } else {
      finite(i);
    }
  }
}

/// bf16 q and k normalised by weights holding NaN payloads (the only f32 operand of a bf16 -> bf16 row),
/// rotated into a bf16 cache: wherever the reference backend writes a NaN, the SIMD kernels must write a NaN
/// too, and the same bits elsewhere. The norm's x * r * w takes w's payload, quieted, into the rounding.
TEST(NaNPayload, NormWeightsWithAnyNaNPayloadGiveNaNInBf16OutputsOnEveryTarget) {
  constexpr int64_t T = 3, Hq = 4, Hkv = 2, D = 128;
  Spec spec;
  spec.head_dim = D;
  Rope rope(spec);
  Buf q(DType::kBF16, T * Hq * D, 1), k(DType::kBF16, T * Hkv * D, 2), v(DType::kBF16, T * Hkv * D, 3);
  std::vector<float> w(D, 0.75f);
  for (size_t i = 0; i < std::size(kNaNs); ++i) w[7 + 19 * i] = nan_bits(kNaNs[i]);  // both halves, several vectors
  std::vector<int64_t> slots = {0, 1, 2};
  auto run = [&](Backend backend, std::vector<uint16_t>* q_out, std::vector<uint16_t>* kc) {
    Buf qc = q;
    q_out->clear();
    kc->assign(static_cast<size_t>(T * Hkv * D), 0);
    std::vector<uint16_t> vc(kc->size(), 0);
    PrologueArgs a;
    a.q = qc.view({T, Hq, D});
    a.k = k.view({T, Hkv, D});
    a.v = v.view({T, Hkv, D});
    a.positions = Positions::contiguous(5);
    a.sources = {{&rope, std::nullopt}};
    a.k_cache = TensorView::contiguous(kc->data(), DType::kBF16, {T, 1, Hkv, D});
    a.v_cache = TensorView::contiguous(vc.data(), DType::kBF16, {T, 1, Hkv, D});
    a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
    a.q_norm_weight = TensorView::contiguous(w.data(), DType::kF32, {D});
    a.k_norm_weight = TensorView::contiguous(w.data(), DType::kF32, {D});
    a.backend = backend;
    prologue(a);
    q_out->resize(static_cast<size_t>(T * Hq * D));
    std::memcpy(q_out->data(), qc.data(), q_out->size() * 2);
  };
  std::vector<uint16_t> want_q, want_k;
  run(Backend::kReference, &want_q, &want_k);
  ASSERT_GT(count_nans(want_q), T * Hq * 5);  // every row has NaNs where the weights do (and where the rotation mixes them)
  testing::for_each_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    std::vector<uint16_t> got_q, got_k;
    run(Backend::kCpu, &got_q, &got_k);
    for (auto [want, got] : {std::pair{&want_q, &got_q}, std::pair{&want_k, &got_k}})
      expect_nans_kept(*want, *got, [&](size_t i) { ASSERT_EQ((*want)[i], (*got)[i]) << "element " << i; });
  });
}

/// f32 k and v holding NaN payloads, rotated (k) and converted (v) into bf16 caches, with and without a
/// norm: NaN wherever the reference backend writes one, the same value (to one bf16 ulp) elsewhere.
TEST(NaNPayload, F32InputsWithAnyNaNPayloadGiveNaNInABf16CacheOnEveryTarget) {
  constexpr int64_t T = 4, Hkv = 2, D = 64;
  Spec spec;
  spec.head_dim = D;
  Rope rope(spec);
  Buf k(DType::kF32, T * Hkv * D, 2), v(DType::kF32, T * Hkv * D, 3);
  for (int64_t row = 0; row < T * Hkv; ++row)
    for (size_t i = 0; i < std::size(kNaNs); ++i) {
      const auto at = static_cast<size_t>(row * D + static_cast<int64_t>((5 + 13 * i + static_cast<size_t>(row)) % D));
      reinterpret_cast<float*>(k.data())[at] = nan_bits(kNaNs[i]);
      reinterpret_cast<float*>(v.data())[at] = nan_bits(kNaNs[i]);
    }
  std::vector<float> w(D, 1.25f);
  std::vector<int64_t> slots = {3, 0, 2, 1};
  auto run = [&](Backend backend, bool norm, std::vector<uint16_t>* kc, std::vector<uint16_t>* vc) {
    kc->assign(static_cast<size_t>(T * Hkv * D), 0);
    vc->assign(kc->size(), 0);
    PrologueArgs a;
    a.k = k.view({T, Hkv, D});
    a.v = v.view({T, Hkv, D});
    a.positions = Positions::contiguous(3);
    a.sources = {{&rope, std::nullopt}};
    a.k_cache = TensorView::contiguous(kc->data(), DType::kBF16, {T, 1, Hkv, D});
    a.v_cache = TensorView::contiguous(vc->data(), DType::kBF16, {T, 1, Hkv, D});
    a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
    if (norm) a.k_norm_weight = TensorView::contiguous(w.data(), DType::kF32, {D});
    a.backend = backend;
    prologue(a);
  };
  for (bool norm : {false, true}) {
    SCOPED_TRACE(norm ? "k norm" : "no norm");
    std::vector<uint16_t> want_k, want_v;
    run(Backend::kReference, norm, &want_k, &want_v);
    ASSERT_EQ(count_nans(want_v), T * Hkv * static_cast<int64_t>(std::size(kNaNs)));
    testing::for_each_target([&](const std::string& target) {
      SCOPED_TRACE(target);
      std::vector<uint16_t> got_k, got_v;
      run(Backend::kCpu, norm, &got_k, &got_v);
      for (auto [want, got] : {std::pair{&want_k, &got_k}, std::pair{&want_v, &got_v}})
        expect_nans_kept(*want, *got, [&](size_t i) {  // the reference rotates f32 inputs in double: one bf16 ulp
          ASSERT_LE(std::abs(int{(*want)[i]} - int{(*got)[i]}), 1) << "element " << i;
        });
    });
  }
}

/// Infinities, NaNs, signed zeros and subnormals in q, k and v of every input dtype, written into caches of
/// every 16/32-bit dtype, both pairings, with and without the norm, on every target: each output has the
/// reference backend's class (NaN, +-inf, +-0) and, when finite, its value to one unit of the output's last
/// place (the reference may round from double).
TEST(NaNPayload, SpecialValuesKeepTheirClassOnEveryPathAndTarget) {
  constexpr int64_t T = 3, Hq = 2, Hkv = 1, D = 64;
  Spec spec;
  spec.head_dim = D;
  const double specials[] = {INFINITY, -INFINITY, NAN, -0.0, 0.0, 1e-41, -6e-8, 3e4, -1e-5};
  for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved}) {
    spec.pairing = pairing;
    Rope rope(spec);
    for (DType in : {DType::kF32, DType::kF16, DType::kBF16})
      for (DType cache : {DType::kF32, DType::kF16, DType::kBF16})
        for (bool norm : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(in)) + " -> " + dtype_name(cache) + (norm ? " norm" : "") +
                       (pairing == Pairing::kHalfSplit ? " half" : " interleaved"));
          Buf q(in, T * Hq * D, 1), k(in, T * Hkv * D, 2), v(in, T * Hkv * D, 3);
          for (Buf* b : {&q, &k, &v})  // one special per row of the first two tokens, the last token plain
            for (int64_t row = 0; row < 2 * b->size() / (T * D); ++row)
              detail::store_from_double(b->data(), in, row * D + (row * 7) % D,
                                        specials[static_cast<size_t>(row + (b == &k) * 3 + (b == &v) * 5) % std::size(specials)]);
          std::vector<float> w(D, 0.5f);
          std::vector<int64_t> slots = {2, 0, 1};
          auto run = [&](Backend backend, Buf* q_out, Buf* kc, Buf* vc) {
            *q_out = q;
            *kc = Buf(cache, T * Hkv * D);
            *vc = Buf(cache, T * Hkv * D);
            PrologueArgs a;
            a.q = q_out->view({T, Hq, D});
            a.k = k.view({T, Hkv, D});
            a.v = v.view({T, Hkv, D});
            a.positions = Positions::contiguous(0);  // token 0: sin 0, so inf * sin is NaN
            a.sources = {{&rope, std::nullopt}};
            a.k_cache = kc->view({T, 1, Hkv, D});
            a.v_cache = vc->view({T, 1, Hkv, D});
            a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
            if (norm) a.q_norm_weight = a.k_norm_weight = TensorView::contiguous(w.data(), DType::kF32, {D});
            a.backend = backend;
            prologue(a);
          };
          Buf want[3], got[3];
          run(Backend::kReference, &want[0], &want[1], &want[2]);
          testing::for_each_target([&](const std::string& target) {
            SCOPED_TRACE(target);
            run(Backend::kCpu, &got[0], &got[1], &got[2]);
            for (int t = 0; t < 3; ++t)
              for (int64_t i = 0; i < want[t].size(); ++i) {
                const double a = want[t].at(i), b = got[t].at(i);
                const std::string where = "tensor " + std::to_string(t) + " element " + std::to_string(i);
                if (std::isnan(a) || std::isinf(a) || a == 0.0) {
                  ASSERT_EQ(std::isnan(a), std::isnan(b)) << where << ": want " << a << " got " << b;
                  if (!std::isnan(a)) ASSERT_EQ(a, b) << where;
                  if (a == 0.0) ASSERT_EQ(std::signbit(a), std::signbit(b)) << where;
                } else {  // f32 arithmetic: errors scale with the row's magnitude (a difference may cancel)
                  double row_max = 0.0;
                  for (int64_t j = i / D * D; j < i / D * D + D; ++j)
                    if (std::isfinite(want[t].at(j))) row_max = std::fmax(row_max, std::fabs(want[t].at(j)));
                  const DType out = t == 0 ? in : cache;
                  const double ulp = out == DType::kBF16 ? 0x1p-7 : out == DType::kF16 ? 0x1p-10 : 0x1p-23;
                  const double tiny = out == DType::kF16 ? 0x1p-24 : out == DType::kBF16 ? 0x1p-133 : 0x1p-149;
                  ASSERT_LE(std::fabs(a - b), std::fabs(a) * ulp + row_max * 0x1p-21 + tiny)
                      << where << ": want " << a << " got " << b;
                }
              }
          });
        }
  }
}

/// rotary::apply_cos_sin on bf16 q with caller tables holding NaN payloads (the only f32 operands of a bf16
/// rotation): NaN wherever the reference backend writes one, the same value elsewhere, on every target,
/// both pairings, decode-sized and larger calls.
TEST(NaNPayload, CallerTablesWithAnyNaNPayloadGiveNaNInBf16ApplyOutputsOnEveryTarget) {
  constexpr int64_t H = 3, D = 64, h = D / 2;
  for (int64_t T : {1, 40})
    for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved}) {
      SCOPED_TRACE("T " + std::to_string(T) + (pairing == Pairing::kHalfSplit ? " half" : " interleaved"));
      std::vector<float> cos(static_cast<size_t>(T * h), 0.6f), sin(cos.size(), 0.8f);
      for (int64_t t = 0; t < T; ++t)
        for (size_t i = 0; i < std::size(kNaNs); ++i)
          (i % 2 ? sin : cos)[static_cast<size_t>(t * h) + (3 + 7 * i + static_cast<size_t>(t)) % h] = nan_bits(kNaNs[i]);
      Buf q(DType::kBF16, T * H * D, 4);
      auto run = [&](Backend backend) {
        Buf out = q;
        ApplyArgs a;
        a.q = out.view({T, H, D});
        a.layout = Layout::kTHD;
        a.pairing = pairing;
        a.backend = backend;
        apply_cos_sin(TensorView::contiguous(cos.data(), DType::kF32, {T, h}),
                      TensorView::contiguous(sin.data(), DType::kF32, {T, h}), a);
        std::vector<uint16_t> bits(static_cast<size_t>(T * H * D));
        std::memcpy(bits.data(), out.data(), bits.size() * 2);
        return bits;
      };
      const std::vector<uint16_t> want = run(Backend::kReference);
      ASSERT_GE(count_nans(want), T * H * static_cast<int64_t>(std::size(kNaNs)));
      testing::for_each_target([&](const std::string& target) {
        SCOPED_TRACE(target);
        const std::vector<uint16_t> got = run(Backend::kCpu);
        expect_nans_kept(want, got, [&](size_t i) {  // the reference rotates in double: one bf16 ulp apart,
          // or f32 cancellation (inputs ~1)
          const double a = testing::bf16_bits_to_f32(want[i]), b = testing::bf16_bits_to_f32(got[i]);
          ASSERT_LE(std::fabs(a - b), std::fabs(a) * 0x1p-7 + 0x1p-20) << "element " << i << ": want " << a << " got " << b;
        });
      });
    }
}

}  // namespace
}  // namespace rotary

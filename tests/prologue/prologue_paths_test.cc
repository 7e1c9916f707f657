// rotary::prologue's row paths bit for bit: each SIMD path (rotation in registers, norm in registers, quantised rows in registers, scratch rows) stores the f32 result rounded or quantised once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "prologue/prologue_testing.h"

namespace rotary {
namespace {

using testing::Buf;

TEST(Prologue, WithoutNormQAndCachedKAreApplysRotationBitForBit) {
  // Rows without a norm whose output keeps the input's dtype take the apply kernels' register path
  // (cpu/kernels.h rotate_token_rows) where the rotated part is whole vectors, the prologue's own row
  // path elsewhere: either way q (in place or to q_out) and k's cache rows must hold exactly what
  // Rope::apply writes for the same rows, partial rotation (the copied channels) included.
  constexpr int64_t T = 3, Hq = 4, Hkv = 2, NB = 2, BS = 4;
  int64_t compared = 0;
  testing::for_each_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
      for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
        for (auto [D, R] : {std::pair<int64_t, int64_t>{128, 128}, {96, 64}, {64, 64}, {40, 24}, {16, 8}})
          for (bool q_out : {false, true})
            for (CacheLayout layout : {CacheLayout::kNHD, CacheLayout::kHND}) {
              SCOPED_TRACE(std::string(dtype_name(dt)) + " " + pairing_name(pairing) + " D" + std::to_string(D) + " R" +
                           std::to_string(R) + (q_out ? " q_out " : " ") + cache_layout_name(layout));
              Spec spec;
              spec.head_dim = D;
              spec.rotary_dim = R;
              spec.pairing = pairing;
              Rope rope(spec);
              const Buf q0(dt, T * Hq * D, 1), k0(dt, T * Hkv * D, 2), v0(dt, T * Hkv * D, 3);
              Buf q = q0, k = k0, v = v0, qo(dt, T * Hq * D), kc(dt, NB * BS * Hkv * D), vc(dt, NB * BS * Hkv * D);
              std::vector<int64_t> slots = {5, 0, 6};
              PrologueArgs a;
              a.layout = Layout::kTHD;
              a.q = q.view({T, Hq, D});
              a.k = k.view({T, Hkv, D});
              a.v = v.view({T, Hkv, D});
              if (q_out) a.q_out = qo.view({T, Hq, D});
              a.positions = Positions::contiguous(1000);
              a.sources = {{&rope, std::nullopt}};
              a.cache_layout = layout;
              a.k_cache = layout == CacheLayout::kNHD ? kc.view({NB, BS, Hkv, D}) : kc.view({NB, Hkv, BS, D});
              a.v_cache = layout == CacheLayout::kNHD ? vc.view({NB, BS, Hkv, D}) : vc.view({NB, Hkv, BS, D});
              a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
              a.threads = 1;
              prologue(a);
              Buf qa = q0, ka = k0;
              ApplyArgs ap;
              ap.layout = Layout::kTHD;
              ap.q = qa.view({T, Hq, D});
              ap.k = ka.view({T, Hkv, D});
              ap.positions = a.positions;
              ap.threads = 1;
              rope.apply(ap);
              EXPECT_EQ(q_out ? qo.bytes : q.bytes, qa.bytes) << "q";
              const size_t row = static_cast<size_t>(D) * dtype_size(dt);
              for (int64_t t = 0; t < T; ++t)
                for (int64_t h = 0; h < Hkv; ++h) {
                  const int64_t blk = slots[static_cast<size_t>(t)] / BS, off = slots[static_cast<size_t>(t)] % BS;
                  const int64_t r = layout == CacheLayout::kNHD ? (blk * BS + off) * Hkv + h : (blk * Hkv + h) * BS + off;
                  EXPECT_EQ(std::memcmp(kc.bytes.data() + static_cast<size_t>(r) * row,
                                        ka.bytes.data() + static_cast<size_t>(t * Hkv + h) * row, row), 0)
                      << "k t" << t << " h" << h;
                  EXPECT_EQ(std::memcmp(vc.bytes.data() + static_cast<size_t>(r) * row,
                                        v0.bytes.data() + static_cast<size_t>(t * Hkv + h) * row, row), 0)
                      << "v t" << t << " h" << h;
                }
              ++compared;
              if (HasFailure()) return;
            }
  });
  EXPECT_GT(compared, 100);
}

/// A thd call on T tokens of H heads of D channels (q, k and v rows, q in place) that writes k and v into
/// paged caches of NB blocks of BS slots at `slots`, positions start, start + 1, ..., one frequency source.
PrologueArgs paged_call(Buf& q, Buf& k, Buf& v, Buf& kc, Buf& vc, int64_t T, int64_t H, int64_t D, int64_t NB,
                        int64_t BS, std::vector<int64_t>& slots, Rope& rope, int64_t start) {
  PrologueArgs a;
  a.layout = Layout::kTHD;
  a.q = q.view({T, H, D});
  a.k = k.view({T, H, D});
  a.v = v.view({T, H, D});
  a.positions = Positions::contiguous(start);
  a.sources = {{&rope, std::nullopt}};
  a.k_cache = kc.view({NB, BS, H, D});
  a.v_cache = vc.view({NB, BS, H, D});
  a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
  a.threads = 1;
  return a;
}

TEST(Prologue, NormedHalfPrecisionRowsAreTheF32ResultRoundedOnceOnEveryPath) {
  // bf16 and f16 rows with a norm take, by target and shape, the rows in registers (half-split, fully
  // rotated, K = h / lanes of 1, 2 or 4: HalfNormRowsInRegisters, two rows in flight, three on AVX-512; head
  // counts 1 to 7 end the rows each way), the block-order path (bf16: two vectors narrowed per pack), AVX512-BF16 narrowing,
  // or the generic row path; into an f32 cache the same rows take the generic row path and keep the f32
  // result. Rows of q are also given as k (Hkv = Hq), so q's in-place 16-bit output and k's 16-bit cache
  // rows must both equal the f32 cache's values rounded to nearest even, bit for bit. Weights of f32
  // subnormal size (offset 0) make subnormal results, which AVX512-BF16's narrowing would flush to zero.
  // One token (T = 1) computes its rows' factors before the rows (the decode order), three one row ahead.
  constexpr int64_t NB = 1, BS = 4;
  int64_t compared = 0;
  testing::for_each_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    for (int64_t T : {3, 1})
    for (DType dt : {DType::kBF16, DType::kF16})
    for (int64_t H : {7, 5, 4, 3, 2, 1})
    for (auto [D, R] : {std::pair<int64_t, int64_t>{128, 128}, {64, 64}, {32, 32}, {16, 16}, {96, 64}, {48, 48}})
      for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
        for (double offset : {0.0, 1.0})
        for (double w_sigma : {0.3, 3e-39}) {
          SCOPED_TRACE("T" + std::to_string(T) + " " + std::string(dtype_name(dt)) + " H" + std::to_string(H) +
                       " D" + std::to_string(D) + " R" +
                       std::to_string(R) + " " + pairing_name(pairing) + " offset " + std::to_string(offset) +
                       (w_sigma < 1e-30 ? " subnormal-size weights" : ""));
          Spec spec;
          spec.head_dim = D;
          spec.rotary_dim = R;
          spec.pairing = pairing;
          Rope rope(spec);
          const Buf q0(dt, T * H * D, 7), v0(dt, T * H * D, 8);
          Buf w(DType::kF32, D, 9, w_sigma);
          std::vector<int64_t> slots = {2, 0, 3};
          slots.resize(static_cast<size_t>(T));
          std::vector<Buf> kc, vc, qs;
          for (DType cache : {dt, DType::kF32}) {
            Buf q = q0, k = q0, v = v0;
            kc.emplace_back(cache, NB * BS * H * D);
            vc.emplace_back(cache, NB * BS * H * D);
            PrologueArgs a = paged_call(q, k, v, kc.back(), vc.back(), T, H, D, NB, BS, slots, rope, 77);
            a.q_norm_weight = a.k_norm_weight = w.view({D});
            a.norm_offset = offset;
            prologue(a);
            qs.push_back(q);
          }
          const auto* k16 = reinterpret_cast<const uint16_t*>(kc[0].bytes.data());
          const auto* k32 = reinterpret_cast<const float*>(kc[1].bytes.data());
          const auto* q16 = reinterpret_cast<const uint16_t*>(qs[0].bytes.data());
          for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t d = 0; d < D; ++d) {
                const int64_t row = slots[static_cast<size_t>(t)] * H + h;
                const float f = k32[row * D + d];
                const uint16_t want = dt == DType::kBF16 ? detail::f32_to_bf16(f) : detail::f32_to_f16(f);
                ASSERT_EQ(k16[row * D + d], want) << "k t" << t << " h" << h << " d" << d;
                ASSERT_EQ(q16[(t * H + h) * D + d], want) << "q t" << t << " h" << h << " d" << d;
              }
          ++compared;
        }
  });
  EXPECT_GT(compared, 500);
}

TEST(Prologue, ARowsNormFactorDoesNotDependOnTheRowsBesideIt) {
  // A normed row's factor is computed alone (RmsFactor), or with three other rows' in one tree of lane sums
  // and one vector square root (RmsFactors4 on AVX2: a decode step's factors, and 16-bit rows read ahead) with
  // the same additions in the same order. Each head run alone (one head per call) must give the bits it gets
  // in a call of H heads. Values spread over 2^-10 .. 2^10 make the sums' roundings depend on the order of
  // the additions; k goes into an f32 cache, so no narrowing hides a last bit. D = 36: not whole vectors.
  constexpr int64_t NB = 2, BS = 4;
  int64_t compared = 0;
  testing::for_each_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    for (int64_t T : {1, 5})
    for (DType dt : {DType::kBF16, DType::kF16, DType::kF32})
    for (int64_t H : {8, 7, 6, 5, 2})
    for (int64_t D : {128, 64, 40, 36}) {
      SCOPED_TRACE("T" + std::to_string(T) + " " + std::string(dtype_name(dt)) + " H" + std::to_string(H) + " D" +
                   std::to_string(D));
      Spec spec;
      spec.head_dim = D;
      spec.rotary_dim = D;
      Rope rope(spec);
      Buf q0(dt, T * H * D), k0(dt, T * H * D);
      const Buf v0(dt, T * H * D, 3);
      std::mt19937 g(11);
      std::normal_distribution<double> nd(0.0, 1.0);
      std::uniform_int_distribution<int> ex(-10, 10);
      for (Buf* b : {&q0, &k0})
        for (int64_t i = 0; i < T * H * D; ++i) detail::store_from_double(b->data(), dt, i, std::ldexp(nd(g), ex(g)));
      Buf w(DType::kF32, D, 9, 0.3);
      std::vector<int64_t> slots = {5, 0, 6, 2, 7};
      slots.resize(static_cast<size_t>(T));
      Buf q = q0, k = k0, v = v0, kc(DType::kF32, NB * BS * H * D), vc(DType::kF32, NB * BS * H * D);
      PrologueArgs a = paged_call(q, k, v, kc, vc, T, H, D, NB, BS, slots, rope, 300);
      a.q_norm_weight = a.k_norm_weight = w.view({D});
      prologue(a);
      const size_t es = dtype_size(dt), row = static_cast<size_t>(D) * es;
      for (int64_t h = 0; h < H; ++h) {
        Buf qh(dt, T * D), kh(dt, T * D), vh(dt, T * D), kch(DType::kF32, NB * BS * D), vch(DType::kF32, NB * BS * D);
        for (int64_t t = 0; t < T; ++t) {
          const size_t from = static_cast<size_t>(t * H + h) * row, to = static_cast<size_t>(t) * row;
          std::memcpy(qh.bytes.data() + to, q0.bytes.data() + from, row);
          std::memcpy(kh.bytes.data() + to, k0.bytes.data() + from, row);
          std::memcpy(vh.bytes.data() + to, v0.bytes.data() + from, row);
        }
        PrologueArgs b = paged_call(qh, kh, vh, kch, vch, T, 1, D, NB, BS, slots, rope, 300);
        b.q_norm_weight = b.k_norm_weight = a.q_norm_weight;
        prologue(b);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t slot = slots[static_cast<size_t>(t)];
          ASSERT_EQ(std::memcmp(q.bytes.data() + static_cast<size_t>(t * H + h) * row,
                                qh.bytes.data() + static_cast<size_t>(t) * row, row), 0)
              << "q t" << t << " h" << h;
          ASSERT_EQ(std::memcmp(kc.bytes.data() + static_cast<size_t>(slot * H + h) * D * 4,
                                kch.bytes.data() + static_cast<size_t>(slot) * D * 4, static_cast<size_t>(D) * 4), 0)
              << "k t" << t << " h" << h;
        }
      }
      ++compared;
    }
  });
  EXPECT_GT(compared, 40);
}

TEST(Prologue, QuantisedCacheRowsAreTheF32ResultQuantisedOnEveryPath) {
  // int8 and fp8 rows of 4, 8 or 16 whole vectors, fully rotated or not (AVX2, AVX-512), stay in registers;
  // other rows of k go through the f32 scratch row; f32 rows of v, which nothing changes, are quantised from
  // the input, the others from the scratch row. On every path the codes and the scale must be
  // quantize_int8_row (fp8: quantize_fp8 with the tensor's scale) of the f32 cache's values, bit for bit: head dims from 8 to 256 (whole vectors and
  // remainders on every target), partial rotation, both pairings, with and without the norm, one token
  // (decode) and three; v rows that are all zeros (scale 0), of subnormal size (a subnormal scale, whose
  // quotients need the clamp; or a scale of 0) or hold a NaN, and a k row holding an infinity (a NaN row
  // with the norm, whose factor is then 0).
  constexpr int64_t NB = 1, BS = 4;
  int64_t compared = 0;
  // fp8 scales: k's keeps the values in range, v's (1e-3) saturates most of them.
  float k_fp8_scale = 0.05f, v_fp8_scale = 1e-3f;
  testing::for_each_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    for (DType quant : {DType::kI8, DType::kF8E4M3, DType::kF8E5M2})
    for (int64_t T : {3, 1})
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (auto [D, R] : {std::pair<int64_t, int64_t>{128, 128}, {64, 64}, {32, 32}, {16, 16}, {8, 8}, {256, 256},
                        {96, 64}, {24, 24}})
      for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
        for (bool norm : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(quant)) + " T" + std::to_string(T) + " " + std::string(dtype_name(dt)) + " D" + std::to_string(D) + " R" +
                       std::to_string(R) + " " + pairing_name(pairing) + (norm ? " norm" : ""));
          constexpr int64_t H = 3;
          Spec spec;
          spec.head_dim = D;
          spec.rotary_dim = R;
          spec.pairing = pairing;
          Rope rope(spec);
          const Buf q0(dt, T * H * D, 11);
          Buf k0(dt, T * H * D, 12), v0(dt, T * H * D, 13);
          // v of token 0: head 0 zeros, head 1 of size 1e-39 (f32/bf16: a subnormal scale), head 2 of size
          // 1e-44 (scale 0); token 1, head 1 holds a NaN. k of token 0, head 1 holds an infinity.
          for (int64_t d = 0; d < D; ++d) {
            detail::store_from_double(v0.bytes.data(), dt, d, 0.0);
            detail::store_from_double(v0.bytes.data(), dt, D + d, 1e-39 * std::sin(0.7 * static_cast<double>(d) + 0.3));
            detail::store_from_double(v0.bytes.data(), dt, 2 * D + d, d % 3 == 0 ? 1e-44 : 0.0);
          }
          detail::store_from_double(k0.bytes.data(), dt, D + 1, HUGE_VAL);
          if (T > 1) detail::store_from_double(v0.bytes.data(), dt, (H + 1) * D + 5, std::nan(""));
          Buf w(DType::kF32, D, 14, 0.3);
          std::vector<int64_t> slots = {2, 0, 3};
          slots.resize(static_cast<size_t>(T));
          std::vector<Buf> kc, vc, ks, vs;
          for (DType cache : {DType::kF32, quant}) {
            Buf q = q0, k = k0, v = v0;
            kc.emplace_back(cache, NB * BS * H * D);
            vc.emplace_back(cache, NB * BS * H * D);
            ks.emplace_back(DType::kF32, NB * BS * H);
            vs.emplace_back(DType::kF32, NB * BS * H);
            PrologueArgs a = paged_call(q, k, v, kc.back(), vc.back(), T, H, D, NB, BS, slots, rope, 1234);
            if (cache == DType::kI8) {
              a.k_scale = ks.back().view({NB, BS, H});
              a.v_scale = vs.back().view({NB, BS, H});
            } else if (cache != DType::kF32) {
              a.k_scale = TensorView::contiguous(&k_fp8_scale, DType::kF32, {1});
              a.v_scale = TensorView::contiguous(&v_fp8_scale, DType::kF32, {1});
            }
            if (norm) a.q_norm_weight = a.k_norm_weight = w.view({D});
            prologue(a);
          }
          for (int which = 0; which < 2; ++which) {
            const Buf& f32 = which == 0 ? kc[0] : vc[0];
            const Buf& stored = which == 0 ? kc[1] : vc[1];
            const Buf& scales = which == 0 ? ks[1] : vs[1];
            for (int64_t t = 0; t < T; ++t)
              for (int64_t h = 0; h < H; ++h) {
                const int64_t row = slots[static_cast<size_t>(t)] * H + h;
                std::vector<float> y(static_cast<size_t>(D));
                for (int64_t d = 0; d < D; ++d) y[static_cast<size_t>(d)] = static_cast<float>(f32.at(row * D + d));
                std::vector<uint8_t> want(static_cast<size_t>(D));
                if (quant == DType::kI8) {
                  const float scale = detail::quantize_int8_row(y.data(), D, reinterpret_cast<int8_t*>(want.data()));
                  ASSERT_EQ(detail::f32_bits(scale), detail::f32_bits(static_cast<float>(scales.at(row))))
                      << (which ? "v" : "k") << " t" << t << " h" << h;
                } else {
                  for (int64_t d = 0; d < D; ++d)
                    want[static_cast<size_t>(d)] =
                        detail::quantize_fp8(y[static_cast<size_t>(d)], which == 0 ? k_fp8_scale : v_fp8_scale, quant);
                }
                ASSERT_EQ(0, std::memcmp(want.data(), stored.bytes.data() + row * D, static_cast<size_t>(D)))
                    << (which ? "v" : "k") << " t" << t << " h" << h;
              }
          }
          ++compared;
        }
  });
  EXPECT_GT(compared, 450);
}

}  // namespace
}  // namespace rotary

// rotary::prologue against the fp64 composition (norm -> rotate -> store/quantise) on both backends, and its write rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "prologue/prologue_testing.h"

namespace rotary {
namespace {

using testing::Buf;

struct Grid {
  DType in = DType::kF32;
  DType cache = DType::kF32;
  CacheLayout layout = CacheLayout::kNHD;
  Pairing pairing = Pairing::kHalfSplit;
  int norm = 0;  // 0 off, 1 plain weight, 2 Gemma offset 1
  int64_t D = 64, R = 64;
};

std::string name(const Grid& g) {
  return std::string(dtype_name(g.in)) + "->" + dtype_name(g.cache) + " " + cache_layout_name(g.layout) + " " +
         pairing_name(g.pairing) + " norm" + std::to_string(g.norm) + " D" + std::to_string(g.D) + " R" + std::to_string(g.R);
}

/// One call: thd q [T,5,D] / k [T,3,D] / v [T,3,Dv] in place, two sequences packed (3 + 2 tokens) at
/// offsets 7 and 100, written to a paged cache (slots scattered over 4 blocks of 4, one token skipped)
/// or a contiguous one (starts 1 and 3).
struct Call {
  static constexpr int64_t T = 5, Hq = 5, Hkv = 3, Dv = 24, NB = 4, BS = 4, SMAX = 8;
  Grid g;
  Spec spec;
  std::unique_ptr<Rope> rope;
  Buf q, k, v, q0, k0, v0, kc, vc, ks, vs, wq, wk;
  std::vector<int32_t> cu = {0, 3, 5};
  std::vector<int64_t> seq_off = {7, 100}, slots = {5, 0, 14, -1, 9}, starts = {1, 3};
  float k_tscale = 0.05f, v_tscale = 0.04f;
  PrologueArgs a;

  explicit Call(const Grid& grid) : g(grid) {
    spec.head_dim = g.D;
    spec.rotary_dim = g.R;
    spec.pairing = g.pairing;
    spec.base = 10000.0;
    rope = std::make_unique<Rope>(spec);
    q = Buf(g.in, T * Hq * g.D, 1);
    k = Buf(g.in, T * Hkv * g.D, 2);
    v = Buf(g.in, T * Hkv * Dv, 3);
    q0 = q; k0 = k; v0 = v;
    const bool paged = is_paged(g.layout);
    const int64_t major = paged ? NB : 2, minor = paged ? BS : SMAX;
    kc = Buf(g.cache, major * minor * Hkv * g.D);
    vc = Buf(g.cache, major * minor * Hkv * Dv);
    ks = Buf(DType::kF32, major * minor * Hkv);
    vs = Buf(DType::kF32, major * minor * Hkv);
    wq = Buf(DType::kF32, g.D, 4, 0.3);
    wk = Buf(DType::kF32, g.D, 5, 0.3);
    a.layout = Layout::kTHD;
    a.q = q.view({T, Hq, g.D});
    a.k = k.view({T, Hkv, g.D});
    a.v = v.view({T, Hkv, Dv});
    a.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI32, {3}),
                                    TensorView::contiguous(seq_off.data(), DType::kI64, {2}));
    a.sources = {{rope.get(), std::nullopt}};
    a.cache_layout = g.layout;
    const bool heads_second = g.layout == CacheLayout::kHND || g.layout == CacheLayout::kBHSD;
    auto shape = [&](Buf& b, int64_t d) {
      return heads_second ? b.view({major, Hkv, minor, d}) : b.view({major, minor, Hkv, d});
    };
    a.k_cache = shape(kc, g.D);
    a.v_cache = shape(vc, Dv);
    if (paged) a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
    else a.cache_positions = TensorView::contiguous(starts.data(), DType::kI64, {2});
    if (g.cache == DType::kI8) {
      a.k_scale = heads_second ? TensorView::contiguous(ks.data(), DType::kF32, {major, Hkv, minor})
                               : TensorView::contiguous(ks.data(), DType::kF32, {major, minor, Hkv});
      a.v_scale = a.k_scale;
      a.v_scale.data = vs.data();
    } else if (is_fp8(g.cache)) {
      a.k_scale = TensorView::contiguous(&k_tscale, DType::kF32, {1});
      a.v_scale = TensorView::contiguous(&v_tscale, DType::kF32, {1});
    }
    if (g.norm) {
      a.q_norm_weight = wq.view({g.D});
      a.k_norm_weight = wk.view({g.D});
      a.norm_offset = g.norm == 2 ? 1.0 : 0.0;
      a.norm_eps = 1e-5;
    }
    a.threads = 1;
  }

  int64_t position(int64_t t) const { return t < 3 ? 7 + t : 100 + (t - 3); }
  /// Cache element offset of (token t, head h, channel d) and its scale offset; -1 if t is not written.
  int64_t cache_row(int64_t t, int64_t h, int64_t dim, int64_t* scale_off) const {
    const bool paged = is_paged(g.layout);
    const bool heads_second = g.layout == CacheLayout::kHND || g.layout == CacheLayout::kBHSD;
    int64_t major, minor;
    if (paged) {
      if (slots[static_cast<size_t>(t)] < 0) return -1;
      major = slots[static_cast<size_t>(t)] / BS;
      minor = slots[static_cast<size_t>(t)] % BS;
    } else {
      major = t < 3 ? 0 : 1;
      minor = starts[static_cast<size_t>(major)] + (t < 3 ? t : t - 3);
    }
    const int64_t mc = paged ? BS : SMAX;
    const int64_t row = heads_second ? (major * Hkv + h) * mc + minor : (major * mc + minor) * Hkv + h;
    *scale_off = row;
    return row * dim;
  }
};

/// Checks every written value of the call against the fp64 truth; counts them in *checked.
void check_against_truth(Call& c, int64_t* checked_out) {
  const Frequencies f = compute_frequencies(c.spec.normalized());
  std::vector<double> cs, sn;
  std::vector<double> wq, wk;
  const double off = c.g.norm == 2 ? 1.0 : 0.0;
  for (int64_t i = 0; c.g.norm && i < c.g.D; ++i) {
    wq.push_back(static_cast<float>(c.wq.at(i)) + static_cast<float>(off));
    wk.push_back(static_cast<float>(c.wk.at(i)) + static_cast<float>(off));
  }
  int64_t& checked = *checked_out;
  for (int64_t t = 0; t < Call::T; ++t) {
    testing::truth_cos_sin(f, static_cast<double>(c.position(t)), &cs, &sn);
    auto row_of = [&](const Buf& b, int64_t heads, int64_t dim, int64_t h) {
      std::vector<double> x(static_cast<size_t>(dim));
      for (int64_t d = 0; d < dim; ++d) x[static_cast<size_t>(d)] = b.at((t * heads + h) * dim + d);
      return x;
    };
    for (int64_t h = 0; h < Call::Hq; ++h) {  // q in place, in its own dtype
      const auto y = testing::truth_row(row_of(c.q0, Call::Hq, c.g.D, h), wq, 1e-5, c.g.pairing, cs, sn);
      double mag = 0;
      for (double v : y) mag = std::max(mag, std::fabs(v));
      for (int64_t d = 0; d < c.g.D; ++d, ++checked) {
        const double got = c.q.at((t * Call::Hq + h) * c.g.D + d), want = y[static_cast<size_t>(d)];
        ASSERT_NEAR(got, want, testing::stored_tol(c.g.in, std::fabs(want), mag, 0)) << "q t" << t << " h" << h << " d" << d;
      }
    }
    for (int which = 0; which < 2; ++which) {  // k and v rows in the cache
      const int64_t dim = which == 0 ? c.g.D : Call::Dv;
      const Buf& cache = which == 0 ? c.kc : c.vc;
      const Buf& scales = which == 0 ? c.ks : c.vs;
      for (int64_t h = 0; h < Call::Hkv; ++h) {
        int64_t so = 0;
        const int64_t base = c.cache_row(t, h, dim, &so);
        if (base < 0) continue;
        const std::vector<double> none;
        const auto y = which == 0 ? testing::truth_row(row_of(c.k0, Call::Hkv, dim, h), wk, 1e-5, c.g.pairing, cs, sn)
                                  : row_of(c.v0, Call::Hkv, dim, h);
        double mag = 0;
        for (double v : y) mag = std::max(mag, std::fabs(v));
        double scale = c.g.cache == DType::kI8 ? scales.at(so) : which == 0 ? c.k_tscale : c.v_tscale;
        if (c.g.cache == DType::kI8) EXPECT_NEAR(scale, mag / 127.0, 1e-5 * std::max(1.0, mag)) << "scale t" << t;
        for (int64_t d = 0; d < dim; ++d, ++checked) {
          const double got = testing::cache_value(cache, base + d, scale), want = y[static_cast<size_t>(d)];
          ASSERT_NEAR(got, want, testing::stored_tol(c.g.cache, std::fabs(want), mag, scale))
              << (which ? "v" : "k") << " t" << t << " h" << h << " d" << d;
        }
      }
    }
  }
}

TEST(Prologue, EveryCacheKindLayoutPairingAndNormMatchesTheFp64CompositionOnBothBackends) {
  int64_t combos = 0;
  testing::for_each_target([&](const std::string& target) {
  SCOPED_TRACE(target);
  for (DType in : {DType::kF32, DType::kBF16})
    for (DType cache : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kF8E4M3, DType::kF8E5M2})
      for (CacheLayout layout : {CacheLayout::kNHD, CacheLayout::kHND, CacheLayout::kBSHD, CacheLayout::kBHSD})
        for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
          for (int norm : {0, 1, 2})
            for (auto [D, R] : {std::pair<int64_t, int64_t>{64, 64}, {40, 24}})
              for (Backend backend : {Backend::kReference, Backend::kCpu}) {
                if ((norm == 2 || D == 40) && layout != CacheLayout::kNHD && layout != CacheLayout::kBHSD) continue;
                Grid g{in, cache, layout, pairing, norm, D, R};
                SCOPED_TRACE(name(g) + (backend == Backend::kCpu ? " cpu" : " reference"));
                Call c(g);
                c.a.backend = backend;
                prologue(c.a);
                int64_t checked = 0;
                check_against_truth(c, &checked);
                EXPECT_GT(checked, 0);
                ++combos;
              }
  });
  EXPECT_GT(combos, 500);
}

TEST(Prologue, QuantisedCachesFollowTheDocumentedRoundingOfTheF32ResultBitForBit) {
  // The same call into an f32 cache gives the f32 result y; the i8 / fp8 caches must hold exactly
  // quantize_int8_row(y) / quantize_fp8(y) (plan/quantize.h, the documented rules).
  testing::for_each_target([&](const std::string& target) {
  SCOPED_TRACE(target);
  for (Backend backend : {Backend::kReference, Backend::kCpu})
    for (DType in : {DType::kF32, DType::kBF16})
      for (DType cache : {DType::kI8, DType::kF8E4M3, DType::kF8E5M2})
        for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved}) {
          Grid g{in, DType::kF32, CacheLayout::kNHD, pairing, 1, 64, 64};
          Call f32(g);
          f32.a.backend = backend;
          prologue(f32.a);
          g.cache = cache;
          Call qz(g);
          qz.a.backend = backend;
          prologue(qz.a);
          for (int64_t row = 0; row < Call::NB * Call::BS * Call::Hkv; ++row) {
            for (int which = 0; which < 2; ++which) {
              const int64_t dim = which == 0 ? 64 : Call::Dv;
              const Buf& src = which == 0 ? f32.kc : f32.vc;
              const Buf& dst = which == 0 ? qz.kc : qz.vc;
              std::vector<float> y(static_cast<size_t>(dim));
              for (int64_t d = 0; d < dim; ++d) y[static_cast<size_t>(d)] = static_cast<float>(src.at(row * dim + d));
              if (cache == DType::kI8) {
                std::vector<int8_t> want(static_cast<size_t>(dim));
                const float s = detail::quantize_int8_row(y.data(), dim, want.data());
                const float got_s = static_cast<float>((which == 0 ? qz.ks : qz.vs).at(row));
                bool written = false;
                for (float v : y) written = written || v != 0.0f;
                if (!written) continue;  // an unwritten row (f32 zeros) vs an unwritten i8 row
                ASSERT_EQ(detail::f32_bits(s), detail::f32_bits(got_s)) << "row " << row;
                ASSERT_EQ(0, std::memcmp(want.data(), dst.bytes.data() + row * dim, static_cast<size_t>(dim)))
                    << "row " << row << (which ? " v" : " k");
              } else {
                const float ts = which == 0 ? qz.k_tscale : qz.v_tscale;
                for (int64_t d = 0; d < dim; ++d)
                  ASSERT_EQ(detail::quantize_fp8(y[static_cast<size_t>(d)], ts, cache), dst.bytes[static_cast<size_t>(row * dim + d)])
                      << dtype_name(cache) << " row " << row << " d " << d << " y " << y[static_cast<size_t>(d)];
              }
            }
          }
        }
  });
}

TEST(Prologue, SkippedSlotsAndUnaddressedRowsStayUntouched) {
  for (DType cache : {DType::kBF16, DType::kI8}) {
    Grid g{DType::kF32, cache, CacheLayout::kNHD, Pairing::kHalfSplit, 1, 64, 64};
    Call c(g);
    std::fill(c.kc.bytes.begin(), c.kc.bytes.end(), 0xA5);
    std::fill(c.vc.bytes.begin(), c.vc.bytes.end(), 0x5A);
    std::fill(c.ks.bytes.begin(), c.ks.bytes.end(), 0x11);
    const Buf kc0 = c.kc, vc0 = c.vc, ks0 = c.ks;
    prologue(c.a);
    std::vector<bool> written(static_cast<size_t>(Call::NB * Call::BS), false);
    for (int64_t s : c.slots)
      if (s >= 0) written[static_cast<size_t>(s)] = true;
    const int64_t es = static_cast<int64_t>(dtype_size(cache));
    for (int64_t slot = 0; slot < Call::NB * Call::BS; ++slot) {
      const int64_t kb = slot * Call::Hkv * 64 * es, vb = slot * Call::Hkv * Call::Dv * es;
      const bool k_same = std::memcmp(c.kc.bytes.data() + kb, kc0.bytes.data() + kb, static_cast<size_t>(Call::Hkv * 64 * es)) == 0;
      const bool v_same = std::memcmp(c.vc.bytes.data() + vb, vc0.bytes.data() + vb, static_cast<size_t>(Call::Hkv * Call::Dv * es)) == 0;
      EXPECT_EQ(k_same, !written[static_cast<size_t>(slot)]) << "k slot " << slot;
      EXPECT_EQ(v_same, !written[static_cast<size_t>(slot)]) << "v slot " << slot;
      if (cache == DType::kI8)
        EXPECT_EQ(std::memcmp(c.ks.bytes.data() + slot * Call::Hkv * 4, ks0.bytes.data() + slot * Call::Hkv * 4, Call::Hkv * 4) == 0,
                  !written[static_cast<size_t>(slot)]);
    }
  }
}

TEST(Prologue, ConcurrentCallsIntoDisjointSlotsOfOneCacheEqualOneCall) {
  // Eight threads each write one token's rows (their own slots) of a shared cache, two threads per call.
  Grid g{DType::kBF16, DType::kI8, CacheLayout::kNHD, Pairing::kHalfSplit, 1, 64, 64};
  Call whole(g);
  whole.slots = {5, 0, 14, 2, 9};
  whole.a.slot_mapping = TensorView::contiguous(whole.slots.data(), DType::kI64, {Call::T});
  prologue(whole.a);
  Call parts(g);
  parts.slots = whole.slots;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < Call::T; ++t) {
    pool.emplace_back([&, t] {
      PrologueArgs a = parts.a;
      const int64_t es = static_cast<int64_t>(dtype_size(g.in));
      auto token = [&](TensorView v) {
        v.data = static_cast<unsigned char*>(v.data) + t * v.strides[0] * es;
        v.shape[0] = 1;
        return v;
      };
      a.q = token(a.q);
      a.k = token(a.k);
      a.v = token(a.v);
      a.slot_mapping = TensorView::contiguous(&parts.slots[static_cast<size_t>(t)], DType::kI64, {1});
      a.positions = Positions::contiguous(parts.position(t));
      a.threads = 2;
      prologue(a);
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(whole.kc.bytes, parts.kc.bytes);
  EXPECT_EQ(whole.vc.bytes, parts.vc.bytes);
  EXPECT_EQ(whole.ks.bytes, parts.ks.bytes);
  EXPECT_EQ(whole.q.bytes, parts.q.bytes);
}

TEST(Prologue, ACallWithoutRotationTakesAnyHeadDim) {
  // No frequency source: the norm and the cache write only, so nothing needs D >= 2 (D = 1 was refused with
  // "rotary_dim must be <= head_dim 1, got 2", a rotary_dim the caller never gave).
  for (int64_t D : {1, 3}) {
    for (Backend backend : {Backend::kReference, Backend::kCpu}) {
      SCOPED_TRACE("D " + std::to_string(D) + (backend == Backend::kCpu ? " cpu" : " reference"));
      std::vector<float> k(static_cast<size_t>(2 * D)), kc(static_cast<size_t>(4 * 2 * D), 0.0f), vc(kc);
      for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i + 1);
      const std::vector<float> w(static_cast<size_t>(D), 2.0f);
      int64_t slot = 2;
      PrologueArgs a;
      a.layout = Layout::kTHD;
      a.k = TensorView::contiguous(k.data(), DType::kF32, {1, 2, D});
      a.v = a.k;
      a.k_cache = TensorView::contiguous(kc.data(), DType::kF32, {1, 4, 2, D});
      a.v_cache = TensorView::contiguous(vc.data(), DType::kF32, {1, 4, 2, D});
      a.slot_mapping = TensorView::contiguous(&slot, DType::kI64, {1});
      a.k_norm_weight = TensorView::contiguous(w.data(), DType::kF32, {D});
      a.norm_eps = 0.0;
      a.backend = backend;
      prologue(a);
      for (int64_t h = 0; h < 2; ++h) {
        double ms = 0.0;
        for (int64_t i = 0; i < D; ++i) ms += static_cast<double>(k[static_cast<size_t>(h * D + i)]) * k[static_cast<size_t>(h * D + i)];
        const double r = 1.0 / std::sqrt(ms / static_cast<double>(D));
        for (int64_t i = 0; i < D; ++i) {
          const size_t at = static_cast<size_t>((2 * 2 + h) * D + i);
          EXPECT_NEAR(kc[at], k[static_cast<size_t>(h * D + i)] * r * 2.0, 1e-6);
          EXPECT_EQ(vc[at], k[static_cast<size_t>(h * D + i)]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace rotary

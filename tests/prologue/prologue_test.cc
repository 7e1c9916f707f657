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

/// One call: thd q [T,4,D] / k [T,3,D] / v [T,3,Dv] in place, two sequences packed (3 + 2 tokens) at
/// offsets 7 and 100, written to a paged cache (slots scattered over 4 blocks of 4, one token skipped)
/// or a contiguous one (starts 1 and 3).
struct Call {
  static constexpr int64_t T = 5, Hq = 4, Hkv = 3, Dv = 24, NB = 4, BS = 4, SMAX = 8;
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
  // rotated, K = h / lanes of 1, 2 or 4: HalfNormRowsInRegisters, two rows at a time, so odd head counts
  // end on one row), the block-order path (bf16: two vectors narrowed per pack), AVX512-BF16 narrowing,
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
    for (int64_t H : {4, 3, 1})
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

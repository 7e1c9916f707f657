// rotary::prologue's non-temporal cache writes: large calls store their cache rows streamed, with the same bytes as calls stored normally.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "prologue/prologue_testing.h"

namespace rotary {
namespace {

using testing::Buf;

TEST(Prologue, LargeCacheWritesGiveTheSameBytesWhetherStreamedOrNot) {
  // A call writing more than 16 MiB (q's rows and the cache rows) into 64-byte aligned cache rows stores
  // the cache rows with non-temporal stores (cpu_prologue.cc); the same tokens written in calls of a third
  // of the size (stored normally), or into rows one vector off the alignment (never streamed), must leave
  // identical caches and q. Three kinds of call: k normalised (18 MiB of cache rows), k not normalised
  // (into a bf16 cache: k through the rotation in registers, v copied), and four q heads per k head where
  // q's rows push the call over the threshold (9 MiB of cache rows).
  constexpr int64_t Hkv = 8, D = 128, kParts = 3;
  Spec spec;
  spec.head_dim = D;
  spec.rotary_dim = D;
  Rope rope(spec);
  auto aligned = [](std::vector<unsigned char>& v, size_t bytes, size_t skew) {
    v.assign(bytes + 128, 0);
    const auto p = reinterpret_cast<uintptr_t>(v.data());
    return v.data() + ((64 - p % 64) % 64) + skew;
  };
  struct Kind {
    int64_t hq;
    bool k_norm;
    int64_t divide_tokens;
  };
  const Kind kinds[] = {{2, true, 1}, {2, false, 1}, {32, false, 2}};
  // Inputs drawn once per kind, for the most tokens (16-bit caches); f32 caches take the first half.
  std::vector<std::array<Buf, 3>> inputs;
  for (const Kind& kind : kinds) {
    const int64_t T = 4608 / kind.divide_tokens;
    inputs.push_back({Buf(DType::kBF16, T * kind.hq * D, 1), Buf(DType::kBF16, T * Hkv * D, 2),
                      Buf(DType::kBF16, T * Hkv * D, 3)});
  }
  Buf wk(DType::kF32, D, 4, 0.3);
  testing::for_each_target([&](const std::string& target) {
    SCOPED_TRACE(target);
    for (DType cache : {DType::kF32, DType::kF16, DType::kBF16})
      for (size_t ki = 0; ki < std::size(kinds); ++ki) {
        const Kind& kind = kinds[ki];
        SCOPED_TRACE(std::string(dtype_name(cache)) + " hq " + std::to_string(kind.hq) + (kind.k_norm ? " k norm" : ""));
        const int64_t Hq = kind.hq;
        const int64_t T = (cache == DType::kF32 ? 2304 : 4608) / kind.divide_tokens;
        const Buf& q = inputs[ki][0];
        const Buf& k = inputs[ki][1];
        const Buf& v = inputs[ki][2];
        const auto bytes = static_cast<size_t>(T * Hkv * D) * dtype_size(cache);
        std::vector<std::vector<unsigned char>> store(6);
        std::vector<unsigned char*> kc(3), vc(3);
        std::vector<Buf> qs;
        for (int run = 0; run < 3; ++run) {  // 0: one call, 1: three calls, 2: one call into unaligned rows
          const size_t skew = run == 2 ? 32 : 0;
          kc[run] = aligned(store[2 * run], bytes, skew);
          vc[run] = aligned(store[2 * run + 1], bytes, skew);
          Buf qr = q, kr = k, vr = v;
          const int64_t parts = run == 1 ? kParts : 1, per = T / parts;
          for (int64_t part = 0; part < parts; ++part) {
            PrologueArgs a;
            a.layout = Layout::kTHD;
            const int64_t t0 = part * per;
            a.q = TensorView::contiguous(qr.bytes.data() + t0 * Hq * D * 2, DType::kBF16, {per, Hq, D});
            a.k = TensorView::contiguous(kr.bytes.data() + t0 * Hkv * D * 2, DType::kBF16, {per, Hkv, D});
            a.v = TensorView::contiguous(vr.bytes.data() + t0 * Hkv * D * 2, DType::kBF16, {per, Hkv, D});
            a.positions = Positions::contiguous(t0);
            a.sources = {{&rope, std::nullopt}};
            a.cache_layout = CacheLayout::kBSHD;
            a.k_cache = TensorView::contiguous(kc[run], cache, {1, T, Hkv, D});
            a.v_cache = TensorView::contiguous(vc[run], cache, {1, T, Hkv, D});
            std::vector<int64_t> start = {t0};
            a.cache_positions = TensorView::contiguous(start.data(), DType::kI64, {1});
            if (kind.k_norm) a.k_norm_weight = wk.view({D});
            a.threads = 2;
            prologue(a);
          }
          qs.push_back(qr);
        }
        for (int run = 1; run < 3; ++run) {
          EXPECT_EQ(std::memcmp(kc[0], kc[run], bytes), 0) << "k cache, run " << run;
          EXPECT_EQ(std::memcmp(vc[0], vc[run], bytes), 0) << "v cache, run " << run;
          EXPECT_EQ(qs[0].bytes, qs[static_cast<size_t>(run)].bytes) << "q, run " << run;
        }
        EXPECT_NE(std::count(kc[0], kc[0] + bytes, 0), static_cast<std::ptrdiff_t>(bytes));
        EXPECT_NE(std::count(vc[0], vc[0] + bytes, 0), static_cast<std::ptrdiff_t>(bytes));
      }
  });
}

}  // namespace
}  // namespace rotary

// rotary::prologue walks many tokens in chunks (q rows, then k rows, then v rows): the same bytes as one token per call.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "prologue/prologue_testing.h"

namespace rotary {
namespace {

using testing::Buf;

TEST(Prologue, ManyTokensWalkedInChunksGiveTheBytesOfOneTokenPerCall) {
  // 129 tokens on one thread are three chunks of RunTokensT (64, 64 and a lone token at D = 128): a call walks
  // each chunk's q rows, then its k rows, then its v rows; a one-token call walks q, k and v of its token. Both
  // must write the same bytes, for cos/sin rows read from the table (one sequence from position 0) and computed
  // per token (two packed sequences past two million, each with its own frequency source), both pairings, with
  // and without the norm, into an f32 (k rotated in registers into the cache), a bf16 and an int8 paged cache
  // (slots scattered, every seventh token skipped). Two threads (on a machine with two cores or more) split the
  // call into ranges of 9 tokens, the last of 3 (one chunk each, all but the first not starting at token 0).
  constexpr int64_t T = 129, Hq = 4, Hkv = 2, D = 128, Dv = 96, BS = 16, NB = 12;
  std::vector<int64_t> slots(T);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), std::mt19937(7));
  for (int64_t t = 0; t < T; t += 7) slots[static_cast<size_t>(t)] = -1;
  std::vector<int32_t> cu = {0, 90, 129};
  const Buf wq(DType::kF32, D, 4, 0.3), wk(DType::kF32, D, 5, 0.3);
  testing::for_each_target([&](const std::string& target) {
    for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
      for (bool far : {false, true}) {
        Spec a_spec, b_spec;
        a_spec.head_dim = b_spec.head_dim = D;
        a_spec.rotary_dim = b_spec.rotary_dim = D;
        a_spec.pairing = b_spec.pairing = pairing;
        b_spec.base = 500000.0;
        Rope ra(a_spec), rb(b_spec);
        std::vector<int64_t> offsets = {2000003, 2500011}, index = {0, 1};
        for (DType in : {DType::kF32, DType::kBF16})
          for (DType cache : {DType::kF32, DType::kBF16, DType::kI8})
            for (bool norm : {false, true})
              for (int threads : {1, 2}) {
                SCOPED_TRACE(target + " " + pairing_name(pairing) + (far ? " far" : " table") + " " + dtype_name(in) +
                             "->" + dtype_name(cache) + (norm ? " norm" : "") + " threads " + std::to_string(threads));
                const Buf q0(in, T * Hq * D, 1), k0(in, T * Hkv * D, 2), v0(in, T * Hkv * Dv, 3);
                Buf q[2] = {q0, q0}, kc[2], vc[2], ks[2], vs[2];
                for (int run = 0; run < 2; ++run) {  // 0: one call, 1: one call per token
                  kc[run] = Buf(cache, NB * BS * Hkv * D);
                  vc[run] = Buf(cache, NB * BS * Hkv * Dv);
                  ks[run] = Buf(DType::kF32, NB * BS * Hkv);
                  vs[run] = Buf(DType::kF32, NB * BS * Hkv);
                  const int64_t n = run == 0 ? T : 1;
                  for (int64_t t0 = 0; t0 < T; t0 += n) {
                    const int64_t es = static_cast<int64_t>(dtype_size(in));
                    PrologueArgs a;
                    a.layout = Layout::kTHD;
                    a.q = TensorView::contiguous(q[run].bytes.data() + t0 * Hq * D * es, in, {n, Hq, D});
                    a.k = TensorView::contiguous(const_cast<unsigned char*>(k0.bytes.data()) + t0 * Hkv * D * es, in,
                                                 {n, Hkv, D});
                    a.v = TensorView::contiguous(const_cast<unsigned char*>(v0.bytes.data()) + t0 * Hkv * Dv * es, in,
                                                 {n, Hkv, Dv});
                    const int seq = t0 < cu[1] ? 0 : 1;
                    if (!far) {
                      a.positions = Positions::contiguous(t0);
                      a.sources = {{&ra, std::nullopt}};
                    } else if (run == 0) {
                      a.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI32, {3}),
                                                      TensorView::contiguous(offsets.data(), DType::kI64, {2}));
                      a.sources = {{&ra, std::nullopt}, {&rb, std::nullopt}};
                      a.source_index = TensorView::contiguous(index.data(), DType::kI64, {2});
                    } else {
                      a.positions = Positions::contiguous(offsets[static_cast<size_t>(seq)] + t0 - cu[static_cast<size_t>(seq)]);
                      a.sources = {{seq == 0 ? &ra : &rb, std::nullopt}};
                    }
                    a.cache_layout = CacheLayout::kNHD;
                    a.k_cache = kc[run].view({NB, BS, Hkv, D});
                    a.v_cache = vc[run].view({NB, BS, Hkv, Dv});
                    a.slot_mapping = TensorView::contiguous(slots.data() + t0, DType::kI64, {n});
                    if (cache == DType::kI8) {
                      a.k_scale = ks[run].view({NB, BS, Hkv});
                      a.v_scale = vs[run].view({NB, BS, Hkv});
                    }
                    if (norm) {
                      a.q_norm_weight = TensorView::contiguous(const_cast<unsigned char*>(wq.bytes.data()), DType::kF32, {D});
                      a.k_norm_weight = TensorView::contiguous(const_cast<unsigned char*>(wk.bytes.data()), DType::kF32, {D});
                    }
                    a.threads = threads;
                    prologue(a);
                  }
                }
                EXPECT_NE(q[0].bytes, q0.bytes);
                const Buf untouched_k(cache, NB * BS * Hkv * D), untouched_v(cache, NB * BS * Hkv * Dv);
                EXPECT_NE(kc[0].bytes, untouched_k.bytes);
                EXPECT_NE(vc[0].bytes, untouched_v.bytes);
                EXPECT_EQ(q[0].bytes, q[1].bytes) << "q";
                EXPECT_EQ(kc[0].bytes, kc[1].bytes) << "k cache";
                EXPECT_EQ(vc[0].bytes, vc[1].bytes) << "v cache";
                EXPECT_EQ(ks[0].bytes, ks[1].bytes) << "k scales";
                EXPECT_EQ(vs[0].bytes, vs[1].bytes) << "v scales";
              }
      }
  });
}

TEST(Prologue, ChunkRowsWithoutNormGiveTheBytesOfOneTokenPerCallForEveryOutput) {
  // Without a norm, a chunk's q rows, and its k rows in place, to k_out or into a cache of the input's dtype, are
  // one register-path call for all the chunk's tokens (cpu/kernels.h TokenRowJob::tokens), falling back token by
  // token where that path refuses. Each output must hold the bytes of one call per token: partial rotation (the
  // channels past rotary_dim copied into q_out / k_out / the cache), NHD and HND caches, tokens 64-127 (a whole
  // chunk) and every fifth token at slot -1, bshd inputs whose chunks cross batch rows (a padded batch stride, so
  // that the plan keeps them apart), two threads.
  constexpr int64_t Hq = 4, Hkv = 2, BS = 16;
  testing::for_each_target([&](const std::string& target) {
    for (DType dt : {DType::kF32, DType::kBF16})
      for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
        for (auto [D, R] : {std::pair<int64_t, int64_t>{64, 64}, {64, 32}})
          for (int out : {0, 1, 2, 3})  // k in place, k_out, NHD cache, HND cache
            for (bool q_out : {false, true})
              for (auto [B, S, threads] : {std::tuple<int64_t, int64_t, int>{1, 150, 1}, {1, 150, 2}, {3, 50, 1}}) {
                SCOPED_TRACE(target + " " + dtype_name(dt) + " " + pairing_name(pairing) + " D" + std::to_string(D) +
                             " R" + std::to_string(R) + " out " + std::to_string(out) + (q_out ? " q_out" : "") +
                             " B" + std::to_string(B) + " threads " + std::to_string(threads));
                const int64_t T = B * S, NB = T / BS + 2, es = static_cast<int64_t>(dtype_size(dt)), P = B * (S + 1);
                Spec spec;
                spec.head_dim = D;
                spec.rotary_dim = R;
                spec.pairing = pairing;
                Rope rope(spec);
                std::vector<int64_t> slots(static_cast<size_t>(NB * BS));
                std::iota(slots.begin(), slots.end(), 0);
                std::shuffle(slots.begin(), slots.end(), std::mt19937(11));
                for (int64_t t = 0; t < T; ++t)
                  if (t % 5 == 0 || (t >= 64 && t < 128)) slots[static_cast<size_t>(t)] = -1;
                // Token (b, s) at row b * (S + 1) + s of q, k, v, q_out and k_out (a padding row after each batch row).
                const Buf q0(dt, P * Hq * D, 1), k0(dt, P * Hkv * D, 2), v0(dt, P * Hkv * D, 3);
                Buf q[2] = {q0, q0}, k[2] = {k0, k0}, qo[2], ko[2], kc[2], vc[2];
                for (int run = 0; run < 2; ++run) {  // 0: one call, 1: one call per token
                  qo[run] = Buf(dt, P * Hq * D);
                  ko[run] = Buf(dt, P * Hkv * D);
                  kc[run] = Buf(dt, NB * BS * Hkv * D);
                  vc[run] = Buf(dt, NB * BS * Hkv * D);
                  const int64_t n = run == 0 ? T : 1;
                  for (int64_t t0 = 0; t0 < T; t0 += n) {
                    // One call: [B, S] tokens, batch stride S + 1 rows; one token: [1, 1] at sequence position t0 % S.
                    auto at = [&](const Buf& b, int64_t heads) {
                      return const_cast<unsigned char*>(b.bytes.data()) + (t0 + t0 / S) * heads * D * es;
                    };
                    auto view = [&](const Buf& b, int64_t heads) {
                      return n == T ? TensorView::strided(at(b, heads), dt, {B, S, heads, D},
                                                          {(S + 1) * heads * D, heads * D, D, 1})
                                    : TensorView::contiguous(at(b, heads), dt, {1, 1, heads, D});
                    };
                    PrologueArgs a;
                    a.layout = Layout::kBSHD;
                    a.q = view(q[run], Hq);
                    a.k = view(k[run], Hkv);
                    if (q_out) a.q_out = view(qo[run], Hq);
                    if (out == 1) a.k_out = view(ko[run], Hkv);
                    a.positions = Positions::contiguous(n == T ? 0 : t0 % S);
                    a.sources = {{&rope, std::nullopt}};
                    if (out >= 2) {
                      a.v = view(v0, Hkv);
                      a.cache_layout = out == 2 ? CacheLayout::kNHD : CacheLayout::kHND;
                      a.k_cache = out == 2 ? kc[run].view({NB, BS, Hkv, D}) : kc[run].view({NB, Hkv, BS, D});
                      a.v_cache = out == 2 ? vc[run].view({NB, BS, Hkv, D}) : vc[run].view({NB, Hkv, BS, D});
                      a.slot_mapping = TensorView::contiguous(slots.data() + t0, DType::kI64,
                                                              {n == T ? B : 1, n == T ? S : 1});
                    }
                    a.threads = threads;
                    prologue(a);
                  }
                }
                EXPECT_NE(q_out ? qo[0].bytes : q[0].bytes, q0.bytes);
                EXPECT_EQ(q[0].bytes, q[1].bytes) << "q";
                EXPECT_EQ(qo[0].bytes, qo[1].bytes) << "q_out";
                EXPECT_EQ(k[0].bytes, k[1].bytes) << "k";
                EXPECT_EQ(ko[0].bytes, ko[1].bytes) << "k_out";
                EXPECT_EQ(kc[0].bytes, kc[1].bytes) << "k cache";
                EXPECT_EQ(vc[0].bytes, vc[1].bytes) << "v cache";
                if (out >= 1) EXPECT_NE((out == 1 ? ko[0] : kc[0]).bytes, Buf(dt, out == 1 ? P * Hkv * D : NB * BS * Hkv * D).bytes);
              }
  });
}

}  // namespace
}  // namespace rotary

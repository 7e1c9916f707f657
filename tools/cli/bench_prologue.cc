// `rotary bench --case prologue`: the fused attention prologue vs its streaming limit and vs the same work as separate rotary calls.
//
// Method (docs/performance.md, "The attention prologue"): for each configuration the fused call
// (rotary::prologue: optional q/k RMSNorm, RoPE, q in place, k/v into a paged NHD cache) is timed alternately
// with its limit (timing.h), then alternately with the unfused composition of rotary's own calls — a norm
// pass (prologue without frequency sources or cache: q and k normalised in place), the rotation
// (apply_table, q and k in place), and the cache write (prologue without sources or norm) — in the same
// run (speedup = unfused / fused of that second, alternating pair). Bytes = q, k, v read + q, k cache, v cache written (+ int8 scales); the limit moves the
// same bytes: prefill, the in-place stream over q's bytes then a non-temporal copy of the rest from other memory
// (before 2026-12-05 a non-temporal copy of all of them; until 2026-12-06 the copy read the stream's bytes);
// decode, memcpy on one thread. Decode steps write one fixed cache slot (its
// lines stay cached); cold_us times the fused step writing a different slot each call, cycling through the cache.
// Prefill at one thread also times the fused call on its first few tokens, whose rows stay in cache between calls
// (in_cache_ms, scaled to T): its instructions without memory's stalls, so ceiling = the limit's time for the call's
// bytes / in_cache_ms bounds the ratio that overlapping the work with memory could reach.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_prologue.h"
#include "cli.h"
#include "rotary/apply.h"
#include "rotary/prologue.h"
#include "timing.h"

namespace rotary::cli {
namespace {

constexpr int64_t kHq = 32, kHkv = 8, kD = 128, kBlock = 16, kNumBlocks = 800;  // 12 800 cache rows

struct Model {
  const char* name;
  double base;
  bool llama3;
};

Spec model_spec(const Model& m) {
  Spec s;
  s.head_dim = kD;
  s.rotary_dim = kD;
  s.base = m.base;
  if (m.llama3) {
    s.max_position_embeddings = 131072;
    s.scaling.type = RopeType::kLlama3;
    s.scaling.factor = 8.0;
    s.scaling.original_max_position_embeddings = 8192;
  }
  return s;
}

/// Small values of `dtype` (f32 or bf16) in [-1, 1): no overflow, no subnormals.
void fill(unsigned char* p, size_t n, DType dtype, uint32_t seed) {
  uint32_t st = seed;
  for (size_t i = 0; i < n; ++i) {
    st = st * 1664525u + 1013904223u;
    const float v = static_cast<float>(st >> 8) * (2.0f / 16777216.0f) - 1.0f;
    if (dtype == DType::kF32) {
      reinterpret_cast<float*>(p)[i] = v;
    } else {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(u >> 16);
    }
  }
}

struct Result {
  std::string model, phase, dtype, cache_dtype, limit;
  bool qk_norm;
  int threads;
  double sec, unfused_sec, speedup, bytes, limit_gbps;
  double fused_again_sec = 0.0;  ///< the fused call timed beside the unfused one (speedup's denominator)
  double cold_sec = 0.0;         ///< decode: the fused call writing a different, cold cache slot each time
  double hot_sec = 0.0;          ///< prefill at one thread: the call on hot_tokens tokens that stay in cache
  int64_t hot_tokens = 0;        ///< 0: not timed
  int64_t tokens = 0;            ///< the call's tokens (T)
};

/// The in-cache time scaled to the call's T, and the limit's time for the call's bytes over it (hot_tokens > 0).
double in_cache_sec(const Result& r) {
  return r.hot_sec * static_cast<double>(r.tokens) / static_cast<double>(r.hot_tokens);
}
double ceiling(const Result& r) { return r.bytes / (r.limit_gbps * 1e9) / in_cache_sec(r); }

void print_json(const Result& r, bool huge_pages) {
  nlohmann::ordered_json j;
  j["case"] = "prologue";
  j["model"] = r.model;
  j["phase"] = r.phase;
  j["dtype"] = r.dtype;
  j["cache_dtype"] = r.cache_dtype;
  j["qk_norm"] = r.qk_norm;
  j["threads"] = r.threads;
  j["ms"] = r.sec * 1e3;
  if (r.phase == "decode") j["us"] = r.sec * 1e6;
  const double gbps = r.bytes / r.sec / 1e9;
  j["gbps"] = gbps;
  j["limit"] = r.limit;
  j["limit_gbps"] = r.limit_gbps;
  j["ratio"] = gbps / r.limit_gbps;
  j["unfused_ms"] = r.unfused_sec * 1e3;
  j["fused_again_ms"] = r.fused_again_sec * 1e3;
  j["speedup"] = r.speedup;
  if (r.phase == "decode") j["cold_us"] = r.cold_sec * 1e6;
  if (r.hot_tokens > 0) {
    j["in_cache_ms"] = in_cache_sec(r) * 1e3;
    j["in_cache_tokens"] = r.hot_tokens;
    j["ceiling"] = ceiling(r);
  }
  j["bytes"] = r.bytes;
  j["hugepages"] = huge_pages;
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void print_table(const std::vector<Result>& rows, bool huge_pages) {
  if (huge_pages) std::printf("(--hugepages: buffers advised for transparent huge pages)\n");
  std::printf("%-11s %-7s %-5s %-6s %-4s %3s %11s %8s %-22s %6s %11s %7s %11s %7s\n", "model", "phase", "dtype", "cache",
              "norm", "thr", "time", "GB/s", "limit", "ratio", "unfused", "speedup", "cold slot", "ceiling");
  for (const Result& r : rows) {
    const bool dec = r.phase == "decode";
    char t[32], u[32], c[32] = "", ceil[32] = "";
    std::snprintf(t, sizeof t, dec ? "%.3f us" : "%.3f ms", dec ? r.sec * 1e6 : r.sec * 1e3);
    std::snprintf(u, sizeof u, dec ? "%.3f us" : "%.3f ms", dec ? r.unfused_sec * 1e6 : r.unfused_sec * 1e3);
    if (dec) std::snprintf(c, sizeof c, "%.3f us", r.cold_sec * 1e6);
    if (r.hot_tokens > 0) std::snprintf(ceil, sizeof ceil, "%.3f", ceiling(r));
    const double gbps = r.bytes / r.sec / 1e9;
    std::printf("%-11s %-7s %-5s %-6s %-4s %3d %11s %8.2f %-22s %6.3f %11s %7.2f %11s %7s\n", r.model.c_str(), r.phase.c_str(),
                r.dtype.c_str(), r.cache_dtype.c_str(), r.qk_norm ? "yes" : "no", r.threads, t, gbps, r.limit.c_str(),
                gbps / r.limit_gbps, u, r.speedup, c, ceil);
  }
}

}  // namespace

int run_prologue_bench(bool json, bool quick, const std::vector<int>& thread_counts, bool huge_pages) {
  const Model models[] = {{"llama-3-8b", 500000.0, true}, {"qwen3-8b", 1000000.0, false}};
  const DType dtypes[] = {DType::kF32, DType::kBF16};
  const DType caches[] = {DType::kF32, DType::kBF16, DType::kI8, DType::kF8E4M3};
  struct Phase {
    const char* name;
    int64_t tokens, position;
  };
  const Phase phases[] = {{"prefill", 4096, 0}, {"decode", 1, 12345}};

  // Buffers at the largest size (f32): q/k/v of a prefill, the caches, scales, norm weights.
  const int64_t Tmax = 4096, rows = kNumBlocks * kBlock;
  const bool hp = huge_pages;
  Buffer q(static_cast<size_t>(Tmax * kHq * kD * 4), hp), k(static_cast<size_t>(Tmax * kHkv * kD * 4), hp),
      v(static_cast<size_t>(Tmax * kHkv * kD * 4), hp);
  Buffer kc(static_cast<size_t>(rows * kHkv * kD * 4), hp), vc(static_cast<size_t>(rows * kHkv * kD * 4), hp);
  Buffer ks(static_cast<size_t>(rows * kHkv * 4), hp), vs(static_cast<size_t>(rows * kHkv * 4), hp);
  // Every timed call normalises and rotates q in place, tens of thousands of times per decode configuration.
  // With unequal weights that repeated normalisation scales channel i by w_i / rms per call and drives the
  // smaller channels to subnormals and zeros (which no real step sees, and which take slow paths), so each
  // weight is one value (x -> x * w / rms has the fixed point rms = w). k too: the fused call sends it to the
  // cache, but the unfused composition normalises and rotates k in place (its unequal weights drifted it to
  // subnormals within the decode warm-up, found by a review on 2026-12-05).
  std::vector<float> wq(kD, 0.95f), wk(kD, 0.9f);
  float fp8_scale = 0.01f;
  std::vector<int64_t> slots(static_cast<size_t>(Tmax));
  Limits limits(static_cast<size_t>(Tmax * (kHq + 2 * kHkv) * kD * 4 * 2), hp);

  const long long total = 2LL * 2 * 2 * 4 * 2 * static_cast<long long>(thread_counts.size());
  Progress progress("rotary bench --case prologue", total);
  long long done = 0;
  std::vector<Result> out;
  for (const Model& m : models) {
    Rope rope(model_spec(m));
    for (const Phase& ph : phases) {
      const bool decode = ph.tokens == 1;
      // A decode step follows the prefill of its sequence, which grew the table past its position (and a
      // step adds one row): the step reads table rows, as rotary::prologue's and Rope::apply's auto mode do.
      if (decode) rope.table().ensure(ph.position + 1);
      const Timing timing = decode ? decode_timing(quick) : prefill_timing(quick);
      for (int64_t t = 0; t < ph.tokens; ++t) slots[static_cast<size_t>(t)] = ph.position + t;
      for (DType dt : dtypes) {
        for (DType cd : caches)
          for (bool norm : {false, true})
            for (int threads : thread_counts) {
              if (decode && threads != thread_counts.front()) continue;  // decode runs on the calling thread
              const int thr = decode ? 1 : threads;
              // The same inputs for every configuration, whatever ran before (q is rotated in place).
              fill(q.data(), static_cast<size_t>(ph.tokens * kHq * kD), dt, 1);
              fill(k.data(), static_cast<size_t>(ph.tokens * kHkv * kD), dt, 2);
              fill(v.data(), static_cast<size_t>(ph.tokens * kHkv * kD), dt, 3);
              PrologueArgs a;
              a.layout = Layout::kTHD;
              a.q = TensorView::contiguous(q.data(), dt, {ph.tokens, kHq, kD});
              a.k = TensorView::contiguous(k.data(), dt, {ph.tokens, kHkv, kD});
              a.v = TensorView::contiguous(v.data(), dt, {ph.tokens, kHkv, kD});
              a.positions = Positions::contiguous(ph.position);
              a.sources = {{&rope, std::nullopt}};
              a.cache_layout = CacheLayout::kNHD;
              a.k_cache = TensorView::contiguous(kc.data(), cd, {kNumBlocks, kBlock, kHkv, kD});
              a.v_cache = TensorView::contiguous(vc.data(), cd, {kNumBlocks, kBlock, kHkv, kD});
              a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {ph.tokens});
              if (cd == DType::kI8) {
                a.k_scale = TensorView::contiguous(ks.data(), DType::kF32, {kNumBlocks, kBlock, kHkv});
                a.v_scale = TensorView::contiguous(vs.data(), DType::kF32, {kNumBlocks, kBlock, kHkv});
              } else if (is_fp8(cd)) {
                a.k_scale = a.v_scale = TensorView::contiguous(&fp8_scale, DType::kF32, {1});
              }
              if (norm) {
                a.q_norm_weight = TensorView::contiguous(wq.data(), DType::kF32, {kD});
                a.k_norm_weight = TensorView::contiguous(wk.data(), DType::kF32, {kD});
              }
              a.threads = thr;
              // The unfused composition: norm pass, rotation, cache write (each a rotary call).
              PrologueArgs norm_pass = a, write_pass = a;
              norm_pass.sources.clear();
              norm_pass.v = norm_pass.k_cache = norm_pass.v_cache = norm_pass.slot_mapping = TensorView{};
              norm_pass.k_scale = norm_pass.v_scale = TensorView{};
              write_pass.sources.clear();
              write_pass.q = TensorView{};
              write_pass.q_norm_weight = write_pass.k_norm_weight = TensorView{};
              ApplyArgs rot;
              rot.layout = Layout::kTHD;
              rot.q = a.q;
              rot.k = a.k;
              rot.positions = a.positions;
              rot.threads = thr;
              auto fused = [&] { prologue(a); };
              auto unfused = [&] {
                if (norm) prologue(norm_pass);
                rope.apply(rot);
                prologue(write_pass);
              };
              const double in_bytes = static_cast<double>(ph.tokens * (kHq + 2 * kHkv) * kD * dtype_size(dt));
              const double out_bytes = static_cast<double>(ph.tokens * kHq * kD * dtype_size(dt)) +
                                       static_cast<double>(ph.tokens * 2 * kHkv * kD * dtype_size(cd)) +
                                       (cd == DType::kI8 ? static_cast<double>(ph.tokens * 2 * kHkv * 4) : 0.0);
              const double bytes = in_bytes + out_bytes;
              const size_t half = static_cast<size_t>(bytes / 2) & ~size_t{3};
              // Prefill's limit moves the call's bytes the way the call does: q's rows read and written in place
              // (the in-place stream over q's bytes), the rest copied with non-temporal stores (k, v read; the
              // cache rows written) from memory the stream did not just rewrite, as the call's k and v are other
              // tensors than q (copied from the stream's own first bytes, part of them still in the L3, the limit
              // ran up to a tenth faster: docs/performance.md). Decode (one thread, in cache): memcpy of the
              // same bytes.
              const size_t q_bytes = static_cast<size_t>(ph.tokens * kHq * kD * dtype_size(dt)) & ~size_t{3};
              const size_t rest_half = static_cast<size_t>((bytes - 2.0 * static_cast<double>(q_bytes)) / 2) & ~size_t{3};
              auto limit_fn = [&] {
                if (decode) {
                  limits.memcpy(half, 1);
                } else {
                  limits.inplace_stream(q_bytes, thr);
                  limits.nt_copy(rest_half, thr, (q_bytes + 63) / 64 * 64);
                }
              };
              const auto [sec, limit_sec] = time_pair(fused, limit_fn, timing);
              const auto [unfused_sec, fused_again] = time_pair(unfused, fused, timing);
              // Decode also with a cold cache row: each call writes the next of the cache's 12 800 slots (its
              // lines not recently touched, as a real step's row), against the fixed slot of the other timings.
              double cold_sec = 0.0;
              if (decode) {
                int64_t next = 0;
                auto fused_cold = [&] {
                  slots[0] = next;
                  next = next + 1 == rows ? 0 : next + 1;
                  prologue(a);
                };
                cold_sec = time_pair(fused_cold, limit_fn, timing).first;
                slots[0] = ph.position;
              }
              // Prefill at one thread: the same call on its first tokens, as many as keep the rows it reads and
              // writes within 256 KiB (L2 on every x86 core of these years), repeated so that they stay there
              // (batches of 200 calls; q's weights are each one value, so repeated normalisation keeps q as it is).
              int64_t hot_tokens = 0;
              double hot_sec = 0.0;
              if (!decode && thr == 1) {
                const int64_t per_token = (kHq + 2 * kHkv) * kD * static_cast<int64_t>(dtype_size(dt)) +
                                          2 * kHkv * kD * static_cast<int64_t>(dtype_size(cd));
                hot_tokens = std::max<int64_t>(1, (int64_t(256) << 10) / per_token);
                PrologueArgs hot = a;
                hot.q.shape[0] = hot.k.shape[0] = hot.v.shape[0] = hot.slot_mapping.shape[0] = hot_tokens;
                const Timing hot_timing{quick ? 0.02 : 0.2, quick ? 3 : 9, 200};
                hot_sec = time_pair([&] { prologue(hot); }, [] {}, hot_timing).first;
              }
              Result r;
              r.model = m.name;
              r.phase = ph.name;
              r.dtype = dtype_name(dt);
              r.cache_dtype = dtype_name(cd);
              r.qk_norm = norm;
              r.threads = thr;
              r.sec = sec;
              r.unfused_sec = unfused_sec;
              r.speedup = unfused_sec / fused_again;  // the two timed side by side
              r.fused_again_sec = fused_again;
              r.cold_sec = cold_sec;
              r.hot_sec = hot_sec;
              r.hot_tokens = hot_tokens;
              r.tokens = ph.tokens;
              r.bytes = bytes;
              r.limit = decode ? "memcpy" : "inplace-stream+nt-copy";
              r.limit_gbps = (decode ? 2.0 * static_cast<double>(half)
                                     : 2.0 * static_cast<double>(q_bytes) + 2.0 * static_cast<double>(rest_half)) /
                             limit_sec / 1e9;
              out.push_back(r);
              progress.step(++done);
              if (json) print_json(r, huge_pages);
            }
      }
    }
  }
  progress.done();
  if (!json) print_table(out, huge_pages);
  return 0;
}

}  // namespace rotary::cli

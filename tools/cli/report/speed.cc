// The report's speed line: f32 prefill and decode through Rope::apply against the streaming limit (bench's harness).
#include "speed.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <tuple>
#include <vector>

#include "../cli.h"
#include "../timing.h"
#include "rotary/apply.h"
#include "vectors.h"

namespace rotary::cli::report {
namespace {

struct SpeedResult {
  int64_t tokens = 0, q_heads = 32, kv_heads = 8, head_dim = 0, rotated = 0;  ///< rotated: channels per head moved
  int threads = 1;
  double prefill_s = 0, prefill_limit_s = 0, prefill_bytes = 0;  ///< medians, seconds per call
  double decode_s = 0, decode_limit_s = 0, decode_bytes = 0;
};

SpeedResult measure_speed(const ModelView& mv, int64_t D, bool quick) {
  SpeedResult r;
  r.tokens = quick ? 512 : 4096;
  r.head_dim = D;
  // The in-place call reads and writes only the rotated channels of each head (R of D for partial rotary): the
  // work and its limit count those bytes.
  r.rotated = std::clamp<int64_t>(mv.spec.rotary_dim, 1, D);
  r.threads = std::max(1, int(std::thread::hardware_concurrency()));
  Rope rope(mv.spec);
  Progress progress("report: speed", 2);
  auto q = random_normal(size_t(r.tokens * r.q_heads * D), 51);
  auto k = random_normal(size_t(r.tokens * r.kv_heads * D), 52);
  const size_t prefill_bytes = sizeof(float) * size_t(r.tokens * (r.q_heads + r.kv_heads) * r.rotated);
  Limits limits(prefill_bytes);
  // Alternating directions keeps the magnitudes bounded.
  bool forward = true;
  auto apply = [&](ApplyArgs& a) {
    a.direction = forward ? Direction::kForward : Direction::kInverse;
    forward = !forward;
    rope.apply(a);
  };

  ApplyArgs a;
  a.q = TensorView::contiguous(q.data(), DType::kF32, {r.tokens, r.q_heads, D});
  a.k = TensorView::contiguous(k.data(), DType::kF32, {r.tokens, r.kv_heads, D});
  a.layout = Layout::kTHD;
  std::tie(r.prefill_s, r.prefill_limit_s) = time_pair([&] { apply(a); },
                                                       [&] { limits.inplace_stream(prefill_bytes, r.threads); },
                                                       prefill_timing(quick));
  r.prefill_bytes = 2.0 * double(prefill_bytes);
  progress.step(1);

  // Decode: one new token at the next position; the kernel runs it on the calling thread, so does the limit.
  std::vector<float> dq(q.begin(), q.begin() + r.q_heads * D), dk(k.begin(), k.begin() + r.kv_heads * D);
  const size_t decode_bytes = sizeof(float) * size_t((r.q_heads + r.kv_heads) * r.rotated);
  ApplyArgs d;
  d.q = TensorView::contiguous(dq.data(), DType::kF32, {1, r.q_heads, D});
  d.k = TensorView::contiguous(dk.data(), DType::kF32, {1, r.kv_heads, D});
  d.layout = Layout::kTHD;
  d.positions = Positions::contiguous(r.tokens);
  std::tie(r.decode_s, r.decode_limit_s) =
      time_pair([&] { apply(d); }, [&] { limits.inplace_stream(decode_bytes, 1); }, decode_timing(quick));
  r.decode_bytes = 2.0 * double(decode_bytes);
  progress.step(2);
  progress.done();
  return r;
}

}  // namespace

void report_speed(const ModelView& mv, int64_t D, bool quick, Json& rep) {
  const SpeedResult sp = measure_speed(mv, D, quick);
  const double gbs = 1e-9 * sp.prefill_bytes / sp.prefill_s, lim = 1e-9 * sp.prefill_bytes / sp.prefill_limit_s;
  std::printf("\nspeed (%d threads, f32, in place; timings are noisy on shared machines)\n", sp.threads);
  if (sp.rotated < D)
    std::printf("  (partial rotary: the call moves the %lld rotated of each head's %lld channels; bytes and limits count "
                "those)\n", (long long)sp.rotated, (long long)D);
  std::printf("  prefill q[%lld,%lld,%lld]+k[%lld,%lld,%lld]: %.3f ms (%.1f GB/s) vs streaming read-modify-write "
              "%.3f ms (%.1f GB/s): %.0f%% of the limit\n",
              (long long)sp.tokens, (long long)sp.q_heads, (long long)D, (long long)sp.tokens, (long long)sp.kv_heads,
              (long long)D, sp.prefill_s * 1e3, gbs, sp.prefill_limit_s * 1e3, lim, 100.0 * sp.prefill_limit_s / sp.prefill_s);
  std::printf("  decode  q[1,%lld,%lld]+k[1,%lld,%lld]: %.2f us per step vs %.2f us to stream the same bytes "
              "(one thread, in cache)\n",
              (long long)sp.q_heads, (long long)D, (long long)sp.kv_heads, (long long)D, sp.decode_s * 1e6,
              sp.decode_limit_s * 1e6);
  rep["speed"] = {{"threads", sp.threads},
                  {"quick", quick},
                  {"rotated_channels", sp.rotated},
                  {"prefill", {{"q_shape", {sp.tokens, sp.q_heads, D}},
                               {"k_shape", {sp.tokens, sp.kv_heads, D}},
                               {"seconds", sp.prefill_s},
                               {"gb_per_s", gbs},
                               {"streaming_limit_seconds", sp.prefill_limit_s},
                               {"streaming_limit_gb_per_s", lim},
                               {"fraction_of_limit", sp.prefill_limit_s / sp.prefill_s}}},
                  {"decode", {{"q_shape", {1, sp.q_heads, D}},
                              {"k_shape", {1, sp.kv_heads, D}},
                              {"seconds", sp.decode_s},
                              {"streaming_limit_seconds", sp.decode_limit_s}}}};
}

}  // namespace rotary::cli::report

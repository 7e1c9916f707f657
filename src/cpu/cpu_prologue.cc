// CPU backend of the prologue family: picks the SIMD kernels or the reference fallback, splits tokens (rows) over threads.
#include <algorithm>
#include <cstdint>

#include "cpu/prologue_kernels.h"
#include "cpu/thread_pool.h"
#include "plan/prologue_plan.h"

namespace rotary::detail {
namespace {

/// Below this many bytes moved a call runs on the calling thread (as cpu_apply decides).
constexpr int64_t kInlineBytes = int64_t(256) << 10;
constexpr int64_t kMinBytesPerThread = int64_t(128) << 10;
constexpr int64_t kChunksPerThread = 8;
/// Calls writing at least this store their cache rows non-temporally (cpu_apply streams out-of-place outputs from it).
constexpr int64_t kStreamBytes = int64_t(16) << 20;

bool unit_channels(const PlanRows& r) { return !r.present() || r.s_d == 1 || r.dim <= 1; }

/// Every row of `r` starts on a 64-byte boundary and spans whole 64-byte lines (non-temporal stores
/// need aligned full vectors); f32/f16/bf16 only (quantised rows are stored normally: streamed, AVX2 f32 → int8
/// prefill took 1.5x the time; docs/performance.md).
bool streamable(const PlanRows& r) {
  if (!r.present()) return true;
  if (r.dtype != DType::kF32 && r.dtype != DType::kF16 && r.dtype != DType::kBF16) return false;
  const auto es = static_cast<int64_t>(dtype_size(r.dtype));
  return reinterpret_cast<uintptr_t>(r.data) % 64 == 0 && (r.dim * es) % 64 == 0 && (r.s_major * es) % 64 == 0 &&
         (r.s_minor * es) % 64 == 0 && (r.s_head * es) % 64 == 0;
}

/// Threads for a call moving `moved` bytes (0 in the plan = every usable core).
int64_t thread_count(int asked, int64_t moved) {
  if (moved < kInlineBytes || cpu::in_parallel_region()) return 1;
  const int cores = cpu::usable_cores();
  int64_t threads = asked == 0 ? cores : std::min(asked, cores);
  return std::min(threads, std::max<int64_t>(1, moved / kMinBytesPerThread));
}

template <class Plan, void (*Run)(const Plan&, int64_t, int64_t)>
void split(const Plan& plan, int64_t n, int64_t threads) {
  if (threads <= 1 || n <= 1) return Run(plan, 0, n);
  struct Ctx {
    const Plan* plan;
    int64_t n, per_chunk;
  };
  const int64_t chunks = std::min(n, threads * kChunksPerThread);
  Ctx ctx{&plan, n, (n + chunks - 1) / chunks};
  cpu::parallel_for(static_cast<int>(threads), (n + ctx.per_chunk - 1) / ctx.per_chunk,
                    [](void* p, int64_t chunk) {
                      const auto* c = static_cast<const Ctx*>(p);
                      const int64_t lo = chunk * c->per_chunk;
                      Run(*c->plan, lo, std::min(c->n, lo + c->per_chunk));
                    },
                    &ctx);
}

}  // namespace

void cpu_prologue(const ProloguePlan& p) {
  const Plan& rp = p.rope;
  bool simd = rp.dtype == DType::kF32 || rp.dtype == DType::kF16 || rp.dtype == DType::kBF16;
  for (int i = 0; i < 2; ++i) {
    const int idx = i == 0 ? p.q_index : p.k_index;
    if (idx >= 0) simd = simd && rp.t[idx].in_sd == 1 && rp.t[idx].out_sd == 1;
  }
  simd = simd && (!p.has_v || p.v.in_sd == 1 || p.v_dim <= 1) && unit_channels(p.k_cache) && unit_channels(p.v_cache);
  if (!simd) return reference_prologue(p);
  const int64_t tokens = rp.B * rp.S;
  const int64_t es = static_cast<int64_t>(dtype_size(rp.dtype));
  const int64_t qh = p.q_index >= 0 ? rp.t[p.q_index].heads : 0;
  const int64_t row_bytes = (2 * qh * rp.head_dim + 2 * p.hkv * rp.head_dim + (p.has_v ? 2 * p.hkv * p.v_dim : 0)) * es;
  cpu::PrologueJob job;
  job.plan = &p;
  if (p.k_cache.present()) {
    // The rows the call writes: q's (in place or not) and the cache's. From kStreamBytes on, the cache rows
    // written first are evicted by the rest of the call before it returns, so they are stored
    // non-temporally (no read for ownership; q's rows keep the cache) — apply's rule for its outputs.
    const int64_t cache_bytes =
        tokens * p.hkv * (p.k_cache.dim + (p.has_v ? p.v_cache.dim : 0)) * static_cast<int64_t>(dtype_size(p.k_cache.dtype));
    const int64_t written = cache_bytes + tokens * qh * rp.head_dim * es;
    job.stream_cache = written >= kStreamBytes && streamable(p.k_cache) && streamable(p.v_cache);
  }
  split<cpu::PrologueJob, cpu::run_prologue_tokens>(job, tokens, thread_count(p.threads, tokens * row_bytes));
}

void cpu_rerotate(const RerotatePlan& p) {
  if (!unit_channels(p.rows)) return reference_rerotate(p);
  const auto n = static_cast<int64_t>(p.slots.size());
  // Each row also computes its cos/sin (half sin/cos pairs in double): count it as 64 bytes per pair.
  const int64_t row_bytes = 2 * p.rows.heads * p.rows.dim * static_cast<int64_t>(dtype_size(p.rows.dtype)) + 64 * p.half;
  split<RerotatePlan, cpu::run_rerotate_rows>(p, n, thread_count(p.threads, n * row_bytes));
}

}  // namespace rotary::detail

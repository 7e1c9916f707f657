// CPU backend entry point: picks the SIMD kernel or the reference fallback, resolves the thread count, splits rows.
#include <algorithm>
#include <cstdint>

#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "plan/plan.h"

namespace rotary::detail {
namespace {

/// Below this many bytes moved (read + written) a call runs on the calling thread: waking
/// workers costs more than the work (a decode token of Llama-3-8B q+k in f32 is ~40 KiB).
constexpr int64_t kInlineBytes = int64_t(256) << 10;
/// Each thread gets at least this many bytes of rows, so small calls use fewer threads.
constexpr int64_t kMinBytesPerThread = int64_t(128) << 10;
/// Out-of-place outputs of at least this size use non-temporal stores (they would evict the caches).
constexpr int64_t kStreamBytes = int64_t(16) << 20;
/// Chunks per thread: dynamic hand-out evens out threads slowed by other processes.
constexpr int64_t kChunksPerThread = 8;

struct ChunkedJob {
  const cpu::RowJob* job;
  int64_t rows_per_chunk;
};

void run_chunk(void* ctx, int64_t chunk) {
  const auto* c = static_cast<const ChunkedJob*>(ctx);
  const int64_t r0 = chunk * c->rows_per_chunk;
  const int64_t r1 = std::min(c->job->total_rows, r0 + c->rows_per_chunk);
  cpu::run_rows(*c->job, r0, r1);
}

}  // namespace

void cpu_apply(const Plan& plan) {
  bool simd = plan.dtype == DType::kF32 || plan.dtype == DType::kF16 || plan.dtype == DType::kBF16;
  for (int i = 0; i < plan.ntensors; ++i) {
    simd = simd && plan.t[i].in_sd == 1 && plan.t[i].out_sd == 1;
  }
  if (!simd) return reference_apply(plan);  // f64 and channel-strided views

  cpu::RowJob job;
  job.plan = &plan;
  job.rows_per_token = plan.t[0].heads + (plan.ntensors > 1 ? plan.t[1].heads : 0);
  job.total_rows = plan.B * plan.S * job.rows_per_token;
  if (job.total_rows == 0) return;
  job.table_fast = plan.cs.kind == PlanCosSin::Kind::kTable && plan.pos.kind == PlanPositions::Kind::kOffset &&
                   plan.pos.batch_offsets == nullptr && plan.cs.axis_of_freq.empty();

  const int64_t row_bytes = plan.head_dim * static_cast<int64_t>(dtype_size(plan.dtype));
  const int64_t out_bytes = job.total_rows * row_bytes;
  const int64_t moved = 2 * out_bytes;
  bool inplace = true;
  for (int i = 0; i < plan.ntensors; ++i) inplace = inplace && plan.t[i].inplace();
  job.stream = !inplace && out_bytes >= kStreamBytes;
  // One token (decode): share cos/sin registers across its heads; more: stream rows in order.
  job.row_outer = job.stream || plan.B * plan.S > 1;

  // Threads: 0 = every core this process may run on, N = at most N and never more than those cores.
  int64_t threads = 1;
  if (moved >= kInlineBytes && !cpu::in_parallel_region()) {
    const int cores = cpu::usable_cores_recent();
    threads = plan.threads == 0 ? cores : std::min(plan.threads, cores);
    threads = std::min(threads, std::max<int64_t>(1, moved / kMinBytesPerThread));
  }
  if (threads == 1) return cpu::run_rows(job, 0, job.total_rows);

  const int64_t nchunks_wanted = std::min(job.total_rows, threads * kChunksPerThread);
  ChunkedJob chunked{&job, (job.total_rows + nchunks_wanted - 1) / nchunks_wanted};
  const int64_t nchunks = (job.total_rows + chunked.rows_per_chunk - 1) / chunked.rows_per_chunk;
  cpu::parallel_for(static_cast<int>(threads), nchunks, run_chunk, &chunked);
}

}  // namespace rotary::detail

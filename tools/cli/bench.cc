// `rotary bench`: times the public apply path on Llama-3-8B prefill/decode shapes against memory-speed limits.
//
// Method (docs/performance.md; the harness is timing.h, shared with `rotary report`): every configuration
// and its limit are timed alternately, call by call (prefill) or in batches of calls (decode), and the
// medians are reported. Bytes = input read + output written; ratio = gbps / limit_gbps with the in-place
// stream for in-place cases and the non-temporal copy (prefill) or memcpy (decode) for out-of-place ones.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_cuda.h"
#include "bench_prologue.h"
#include "cli.h"
#include "rotary/apply.h"
#include "rotary/config.h"
#include "rotary/freqs.h"
#include "rotary/table.h"
#include "timing.h"

namespace rotary::cli {
namespace {

constexpr const char* kUsage =
    "rotary bench [--json] [--quick] [--case P1|P2|prologue] [--threads N] [--hugepages] | rotary bench --backend cuda "
    "[--json] [--quick] [--case T1|T4096|T32768|T131072]";

// ------------------------------------------------------------------ cases

struct BenchCase {
  std::string name;      ///< "P1" / "P2"
  int64_t tokens;        ///< T (thd layout)
  int64_t position;      ///< first position
  bool decode;           ///< time in batches and report microseconds
};

constexpr int64_t kHeadsQ = 32, kHeadsK = 8, kHeadDim = 128;

/// Fills `bytes` with small normal values of `dtype` (no denormals, no overflow under rotation).
void fill_values(unsigned char* p, size_t bytes, DType dtype) {
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  if (dtype == DType::kF32) {
    float* f = reinterpret_cast<float*>(p);
    for (size_t i = 0; i < bytes / 4; ++i) f[i] = static_cast<float>(next() >> 8) * (2.0f / 16777216.0f) - 1.0f;
  } else {
    uint16_t* h = reinterpret_cast<uint16_t*>(p);
    for (size_t i = 0; i < bytes / 2; ++i) {
      const uint32_t r = next();
      // sign | exponent for [0.25, 2) | random mantissa
      h[i] = dtype == DType::kBF16 ? static_cast<uint16_t>(((r >> 31) << 15) | ((125u + (r >> 29 & 1u)) << 7) | (r & 0x7Fu))
                                   : static_cast<uint16_t>(((r >> 31) << 15) | ((13u + (r >> 29 & 1u)) << 10) | (r & 0x3FFu));
    }
  }
}

struct Row {
  std::string case_name, dtype, pairing, direction, limit;
  bool inplace;
  int threads;
  double sec, bytes, limit_gbps, memcpy_gbps;
  bool decode;
  double gbps() const { return bytes / sec / 1e9; }
};

/// One JSON line per configuration (fields: docs/cli.md).
void print_json(const Row& r, bool huge_pages) {
  nlohmann::ordered_json j;
  j["case"] = r.case_name;
  j["dtype"] = r.dtype;
  j["pairing"] = r.pairing;
  j["inplace"] = r.inplace;
  j["direction"] = r.direction;
  j["threads"] = r.threads;
  j["ms"] = r.sec * 1e3;
  if (r.decode) j["us"] = r.sec * 1e6;
  j["gbps"] = r.gbps();
  j["limit"] = r.limit;
  j["limit_gbps"] = r.limit_gbps;
  j["ratio"] = r.gbps() / r.limit_gbps;
  j["memcpy_gbps"] = r.memcpy_gbps;
  j["bytes"] = r.bytes;
  j["hugepages"] = huge_pages;
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void print_table(const std::vector<Row>& rows, bool huge_pages) {
  if (huge_pages) std::printf("(--hugepages: buffers advised for transparent huge pages)\n");
  std::printf("%-4s %-5s %-12s %-8s %-9s %3s %10s %9s %-15s %9s %6s\n", "case", "dtype", "pairing", "inplace",
              "direction", "thr", "time", "GB/s", "limit", "limitGB/s", "ratio");
  for (const Row& r : rows) {
    char t[32];
    if (r.decode) std::snprintf(t, sizeof t, "%.3f us", r.sec * 1e6);
    else std::snprintf(t, sizeof t, "%.3f ms", r.sec * 1e3);
    std::printf("%-4s %-5s %-12s %-8s %-9s %3d %10s %9.2f %-15s %9.2f %6.3f\n", r.case_name.c_str(), r.dtype.c_str(),
                r.pairing.c_str(), r.inplace ? "yes" : "no", r.direction.c_str(), r.threads, t, r.gbps(),
                r.limit.c_str(), r.limit_gbps, r.gbps() / r.limit_gbps);
  }
}

/// Llama-3-8B rotary: head 128, theta 5e5, llama3 scaling (the values do not change the timing).
Spec llama3_8b_spec() {
  Spec spec;
  spec.head_dim = kHeadDim;
  spec.rotary_dim = kHeadDim;
  spec.base = 500000.0;
  spec.max_position_embeddings = 131072;
  spec.scaling.type = RopeType::kLlama3;
  spec.scaling.factor = 8.0;
  spec.scaling.original_max_position_embeddings = 8192;
  return spec;
}

const Options kOptions = {
    {"json", nullptr, "print one JSON line per configuration (fields: docs/cli.md) instead of a table", "off"},
    {"quick", nullptr, "time for a fraction of the usual time (a smoke run; noisier numbers)", "off"},
    {"case", "P1|P2|prologue", "only prefill (P1), only decode (P2), or the attention prologue (docs/prologue.md)",
     "P1 and P2"},
    {"threads", "N", "only this thread count (1..1024)", "1 and 2"},
    {"backend", "cpu|cuda", "cuda: time the CUDA kernels (a CUDA build; --case T1|T4096|T32768|T131072)", "cpu"},
    {"hugepages", nullptr,
     "back the timed tensors and the limits' buffers with transparent huge pages (Linux; docs/performance.md)", "off"},
};

int run_bench(const std::vector<std::string>& args) {
  Flags flags(args, kOptions);
  if (!flags.positional().empty()) throw UsageError("unexpected argument " + quote_value(flags.positional()[0]));
  if (auto backend = flags.get("backend")) {
    if (*backend == "cuda") {
      if (flags.has("hugepages"))
        throw UsageError("--hugepages is for the CPU benchmark (host buffers), not --backend cuda");
      return run_bench_cuda(flags);
    }
    if (*backend != "cpu") throw UsageError("--backend must be cpu or cuda, got " + *backend);
  }
  const bool json = flags.has("json");
  const bool quick = flags.has("quick");
  std::vector<BenchCase> cases = {{"P1", 4096, 0, false}, {"P2", 1, 12345, true}};
  std::vector<int> thread_counts = {1, 2};
  if (auto n = flags.get_int("threads")) {
    if (*n < 1 || *n > 1024) throw UsageError("--threads must be in [1, 1024], got " + std::to_string(*n));
    thread_counts = {static_cast<int>(*n)};
  }
  const auto case_name = flags.get("case");
  if (case_name && *case_name != "P1" && *case_name != "P2" && *case_name != "prologue")
    throw UsageError("--case must be P1, P2 or prologue, got " + quote_value(*case_name));
  // After the usage checks: a bad argument is a usage error (exit 2) whatever the machine.
  const bool huge_pages = flags.has("hugepages");
  if (huge_pages && !transparent_huge_pages_available())
    throw Error(Error::Kind::kInvalidArgument,
                "[rotary_bench] --hugepages: this machine has no transparent huge pages to advise (Linux with "
                "/sys/kernel/mm/transparent_hugepage/enabled set to always or madvise)");
  if (case_name) {
    if (*case_name == "prologue") return run_prologue_bench(json, quick, thread_counts, huge_pages);
    cases.erase(std::remove_if(cases.begin(), cases.end(), [&](const BenchCase& b) { return b.name != *case_name; }),
                cases.end());
  }

  CosSinTable table(compute_frequencies(llama3_8b_spec().normalized()));
  int64_t max_pos = 0;
  for (const auto& c : cases) max_pos = std::max(max_pos, c.position + c.tokens);
  table.ensure(max_pos);

  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  const Pairing pairings[] = {Pairing::kHalfSplit, Pairing::kInterleaved};
  const Direction directions[] = {Direction::kForward, Direction::kInverse};
  const long long total = static_cast<long long>(cases.size() * 3 * 2 * 2 * 2 * thread_counts.size());
  Progress progress("rotary bench", total);
  long long done = 0;

  std::vector<Row> rows;
  for (const BenchCase& bc : cases) {
    const Timing timing = bc.decode ? decode_timing(quick) : prefill_timing(quick);
    // Buffers of this case's size (f32 bytes, the largest dtype), allocated per case: a decode step's
    // q and k are small tensors of their own, not the first rows of prefill-sized buffers.
    const size_t q_bytes_max = static_cast<size_t>(bc.tokens * kHeadsQ * kHeadDim * 4);
    const size_t k_bytes_max = static_cast<size_t>(bc.tokens * kHeadsK * kHeadDim * 4);
    Buffer q(q_bytes_max, huge_pages), k(k_bytes_max, huge_pages), q_out(q_bytes_max, huge_pages),
        k_out(k_bytes_max, huge_pages);
    Limits limits(q_bytes_max + k_bytes_max, huge_pages);
    // glibc memcpy of the same bytes, for reference only: (bytes, threads) -> GB/s
    std::map<std::pair<size_t, int>, double> memcpy_gbps;
    auto get_memcpy = [&](size_t bytes, int threads) {
      auto key = std::make_pair(bytes, threads);
      if (auto it = memcpy_gbps.find(key); it != memcpy_gbps.end()) return it->second;
      auto mc = [&] { limits.memcpy(bytes, threads); };
      return memcpy_gbps[key] = 2.0 * static_cast<double>(bytes) / time_pair(mc, mc, timing).first / 1e9;
    };
    for (DType dtype : dtypes) {
      const size_t es = dtype_size(dtype);
      const size_t qb = static_cast<size_t>(bc.tokens * kHeadsQ * kHeadDim) * es;
      const size_t kb = static_cast<size_t>(bc.tokens * kHeadsK * kHeadDim) * es;
      fill_values(q.data(), qb, dtype);
      fill_values(k.data(), kb, dtype);
      for (Pairing pairing : pairings)
        for (bool inplace : {true, false})
          for (Direction direction : directions)
            for (int threads : thread_counts) {
              ApplyArgs a;
              a.layout = Layout::kTHD;
              a.q = TensorView::contiguous(q.data(), dtype, {bc.tokens, kHeadsQ, kHeadDim});
              a.k = TensorView::contiguous(k.data(), dtype, {bc.tokens, kHeadsK, kHeadDim});
              if (!inplace) {
                a.q_out = TensorView::contiguous(q_out.data(), dtype, {bc.tokens, kHeadsQ, kHeadDim});
                a.k_out = TensorView::contiguous(k_out.data(), dtype, {bc.tokens, kHeadsK, kHeadDim});
              }
              a.positions = Positions::contiguous(bc.position);
              a.pairing = pairing;
              a.direction = direction;
              a.threads = threads;
              auto call = [&] { apply_table(table, a); };
              // The kernel runs a decode token on the calling thread whatever `threads` says;
              // so is its limit measured.
              const int limit_threads = bc.decode ? 1 : threads;
              // Out of place: a non-temporal copy for prefill; a decode token's 40 KiB stay in cache,
              // where cache-bypassing stores are the wrong tool, so its limit is memcpy.
              const std::string limit = inplace ? "inplace-stream" : bc.decode ? "memcpy" : "nt-copy";
              auto limit_fn = [&] {
                if (inplace) limits.inplace_stream(qb + kb, limit_threads);
                else if (bc.decode) limits.memcpy(qb + kb, limit_threads);
                else limits.nt_copy(qb + kb, limit_threads);
              };
              const auto [sec, limit_sec] = time_pair(call, limit_fn, timing);
              Row r;
              r.case_name = bc.name;
              r.dtype = dtype_name(dtype);
              r.pairing = pairing_name(pairing);
              r.direction = direction_name(direction);
              r.inplace = inplace;
              r.threads = threads;
              r.decode = bc.decode;
              r.sec = sec;
              r.bytes = 2.0 * static_cast<double>(qb + kb);
              r.limit = limit;
              r.limit_gbps = r.bytes / limit_sec / 1e9;
              r.memcpy_gbps = get_memcpy(qb + kb, limit_threads);
              rows.push_back(r);
              progress.step(++done);
              if (json) print_json(r, huge_pages);
            }
    }
  }
  progress.done();
  if (!json) print_table(rows, huge_pages);
  return 0;
}

}  // namespace

ROTARY_CLI_COMMAND("bench", kUsage,
                   "time the CPU kernels on Llama-3-8B prefill (P1) and decode (P2) against memory-speed limits "
                   "(--backend cuda: the CUDA kernels against a device copy)",
                   run_bench, &kOptions);

}  // namespace rotary::cli

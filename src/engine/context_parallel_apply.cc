// Apply on a context-parallel shard: derive the shard's global positions, then the ordinary apply path.
#include <algorithm>
#include <string>
#include <vector>

#include "rotary/context_parallel.h"

namespace rotary {
namespace {

using Kind = Error::Kind;
constexpr const char* kWhere = "rotary_apply_context_parallel";

[[noreturn]] void invalid(const std::string& msg) { fail(Kind::kInvalidArgument, kWhere, msg); }

std::vector<int64_t> read_int_vector(const TensorView& v, const char* name) {
  if (v.rank != 1 || !is_integer(v.dtype) || v.data == nullptr || v.shape[0] < 1 || v.strides[0] < 0)
    invalid(std::string(name) + " must be a non-null i32/i64 vector [N+1] with N >= 0, got rank " + std::to_string(v.rank));
  std::vector<int64_t> out(static_cast<std::size_t>(v.shape[0]));
  for (int64_t i = 0; i < v.shape[0]; ++i)
    out[static_cast<std::size_t>(i)] = v.dtype == DType::kI32 ? static_cast<const int32_t*>(v.data)[i * v.strides[0]]
                                                              : static_cast<const int64_t*>(v.data)[i * v.strides[0]];
  return out;
}

/// The shard's args with positions replaced by explicit global ids; `ids` keeps them alive.
ApplyArgs shard_args(const ContextParallel& cp, const ApplyArgs& args, std::vector<int64_t>* ids) {
  ApplyArgs a = args;
  if (args.backend == Backend::kCuda)
    fail(Kind::kUnsupported, kWhere, "backend cuda is not supported on a context-parallel shard (its positions are "
                                     "built on the host), got backend cuda");
  const int layout = static_cast<int>(args.layout);
  if (layout < 0 || layout > 2) invalid("layout must be bshd, bhsd or thd, got " + std::to_string(layout));
  if (args.layout == Layout::kTHD) {
    if (args.positions.kind != Positions::Kind::kPacked)
      invalid("thd shards need positions of kind packed carrying the GLOBAL cu_seqlens, got another kind");
    if (args.positions.seq_offsets.data != nullptr) invalid("positions.seq_offsets is not supported on a context-parallel shard");
    const std::vector<int64_t> cu = read_int_vector(args.positions.cu_seqlens, "positions.cu_seqlens");
    *ids = cp_positions_packed(cp, cu);
    if (args.q.rank != 3 || args.q.shape[0] != static_cast<int64_t>(ids->size()))
      invalid("q must be [T_local, H, D] with T_local = cu_seqlens[N]/cp.size = " + std::to_string(ids->size()) +
              ", got shape[0] " + std::to_string(args.q.rank >= 1 ? args.q.shape[0] : -1));
    if (!a.seq_len) {
      int64_t longest = 1;
      for (std::size_t n = 1; n < cu.size(); ++n) longest = std::max(longest, cu[n] - cu[n - 1]);
      a.seq_len = longest;
    }
  } else {
    if (args.positions.kind != Positions::Kind::kOffset || args.positions.batch_offsets.data != nullptr)
      invalid("bshd/bhsd shards need positions of kind offset without batch_offsets, got another kind");
    if (args.q.rank != 4) invalid("q must have rank 4 for layout bshd/bhsd, got rank " + std::to_string(args.q.rank));
    const int64_t S = args.layout == Layout::kBSHD ? args.q.shape[1] : args.q.shape[2];
    *ids = cp_positions(cp, S, args.positions.offset);
    if (!a.seq_len) a.seq_len = args.positions.offset + S * cp.size;
  }
  const int64_t n = static_cast<int64_t>(ids->size());
  a.positions = Positions::from_ids(TensorView::contiguous(ids->data(), DType::kI64, {n}));
  return a;
}

}  // namespace

void apply_context_parallel(Rope& rope, const ContextParallel& cp, const ApplyArgs& args) {
  std::vector<int64_t> ids;
  const ApplyArgs a = shard_args(cp, args, &ids);
  if (ids.empty()) return;
  rope.apply(a);
}

void apply_context_parallel(const Frequencies& freqs, const ContextParallel& cp, const ApplyArgs& args) {
  std::vector<int64_t> ids;
  const ApplyArgs a = shard_args(cp, args, &ids);
  if (ids.empty()) return;
  apply_frequencies(freqs, a);
}

}  // namespace rotary

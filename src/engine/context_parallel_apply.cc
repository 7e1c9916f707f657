// Apply on a context-parallel shard: derive the shard's global positions, then the ordinary apply path.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "engine/plan_request.h"
#include "plan/dtype_scalar.h"
#include "rotary/apply.h"

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
    out[static_cast<std::size_t>(i)] = detail::load_int_index(v.data, v.dtype, i * v.strides[0]);
  return out;
}

}  // namespace

CpShard cp_shard(const ContextParallel& cp, int64_t local_len, int64_t offset) {
  CpShard sh;
  sh.positions = cp_positions(cp, local_len, offset);  // validates cp, local_len and offset
  int64_t global = 0;
  if (__builtin_mul_overflow(local_len, cp.size, &global) || __builtin_add_overflow(global, offset, &sh.seq_len))
    invalid("offset + local_len * cp.size overflows int64, got offset " + std::to_string(offset) + ", local_len " +
            std::to_string(local_len) + ", cp.size " + std::to_string(cp.size));
  return sh;
}

CpShard cp_shard_packed(const ContextParallel& cp, const std::vector<int64_t>& cu) {
  CpShard sh;
  sh.positions = cp_positions_packed(cp, cu);  // validates cp and cu (non-decreasing, divisible lengths)
  for (std::size_t n = 1; n < cu.size(); ++n) sh.seq_len = std::max(sh.seq_len, cu[n] - cu[n - 1]);
  return sh;
}

namespace {

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
    CpShard sh = cp_shard_packed(cp, read_int_vector(args.positions.cu_seqlens, "positions.cu_seqlens"));
    if (args.q.rank != 3 || args.q.shape[0] != static_cast<int64_t>(sh.positions.size()))
      invalid("q must be [T_local, H, D] with T_local = cu_seqlens[N]/cp.size = " + std::to_string(sh.positions.size()) +
              ", got shape[0] " + std::to_string(args.q.rank >= 1 ? args.q.shape[0] : -1));
    // positions.offset starts every sequence there (TransformerEngine's RotaryPositionEmbedding(offset)).
    const int64_t off = args.positions.offset;
    if (off < 0) invalid("positions.offset must be >= 0, got " + std::to_string(off));
    if (off > detail::kMaxPosition + 1 - sh.seq_len)
      invalid("positions.offset + the longest global sequence (" + std::to_string(sh.seq_len) + ") must be <= 2^31, got offset " +
              std::to_string(off));
    for (int64_t& g : sh.positions) g += off;
    *ids = std::move(sh.positions);
    if (!a.seq_len) a.seq_len = sh.seq_len + off;
  } else {
    if (args.positions.kind != Positions::Kind::kOffset || args.positions.batch_offsets.data != nullptr)
      invalid("bshd/bhsd shards need positions of kind offset without batch_offsets, got another kind");
    if (args.q.rank != 4) invalid("q must have rank 4 for layout bshd/bhsd, got rank " + std::to_string(args.q.rank));
    CpShard sh = cp_shard(cp, args.layout == Layout::kBSHD ? args.q.shape[1] : args.q.shape[2], args.positions.offset);
    *ids = std::move(sh.positions);
    if (!a.seq_len) a.seq_len = sh.seq_len;
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

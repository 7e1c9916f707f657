// Context-parallel position mapping (TransformerEngine dual-chunk load balancing), shard <-> global index.
#include "rotary/context_parallel.h"

#include <string>

#include "core/messages.h"

namespace rotary {
namespace {

using Kind = Error::Kind;
constexpr const char* kWhere = "rotary_context_parallel";
// Positions are integers in [0, 2^31) everywhere in rotary; the helpers below refuse to produce more.
constexpr int64_t kPositionLimit = int64_t(1) << 31;

[[noreturn]] void invalid(const std::string& msg) { fail(Kind::kInvalidArgument, kWhere, msg); }
using detail::str;

void check_cp(const ContextParallel& cp) {
  if (cp.size < 1) invalid("cp.size must be >= 1, got " + str(cp.size));
  if (cp.rank < 0 || cp.rank >= cp.size) invalid("cp.rank must be in [0, cp.size = " + str(cp.size) + "), got " + str(cp.rank));
}

/// local_len >= 0, even when size > 1, and the global length local_len * cp.size fits in int64: every
/// map() below is then < local_len * cp.size (no intermediate overflows either).
void check_local_len(const ContextParallel& cp, int64_t local_len) {
  if (local_len < 0) invalid("local_len must be >= 0, got " + str(local_len));
  if (cp.size > 1 && local_len % 2 != 0)
    invalid("local_len must be even (two chunks per rank) when cp.size > 1, got " + str(local_len));
  int64_t global = 0;
  if (__builtin_mul_overflow(local_len, cp.size, &global))
    invalid("local_len * cp.size (the global length) overflows int64, got local_len " + str(local_len) + " and cp.size " +
            str(cp.size));
}

/// 2 * size without overflow (size >= 1 checked by the caller).
int64_t twice(int64_t size, const char* what) {
  int64_t out = 0;
  if (__builtin_mul_overflow(size, int64_t(2), &out)) invalid(std::string(what) + " must be < 2^62, got " + str(size));
  return out;
}

/// No check: callers validated cp and local_len (check_local_len) and the index.
int64_t map(const ContextParallel& cp, int64_t s, int64_t local_len) {
  if (cp.size == 1) return s;
  const int64_t c = local_len / 2;
  return s < c ? cp.rank * c + s : (2 * cp.size - 1 - cp.rank) * c + (s - c);
}

void check_cu(const ContextParallel& cp, const std::vector<int64_t>& cu) {
  if (cu.empty()) invalid("global_cu_seqlens must have at least 1 entry [N+1], got 0");
  if (cu[0] != 0) invalid("global_cu_seqlens[0] must be 0, got " + str(cu[0]));
  const int64_t chunks = twice(cp.size, "cp.size");
  for (std::size_t n = 1; n < cu.size(); ++n) {
    // cu[n-1] >= 0 here (cu[0] = 0, non-decreasing so far): a negative cu[n] is a decrease, and the
    // difference of a non-negative and any int64 cannot overflow when cu[n] >= cu[n-1].
    if (cu[n] < cu[n - 1])
      invalid("global_cu_seqlens must be non-decreasing, got cu[" + str(static_cast<int64_t>(n)) + "] = " + str(cu[n]) +
              " < cu[" + str(static_cast<int64_t>(n - 1)) + "] = " + str(cu[n - 1]));
    const int64_t len = cu[n] - cu[n - 1];
    if (len > kPositionLimit)
      fail(Kind::kOutOfRange, kWhere,
           "every global sequence length must be <= 2^31 (positions are < 2^31), got length " + str(len) +
               " for sequence " + str(static_cast<int64_t>(n - 1)));
    if (cp.size > 1 && len % chunks != 0)
      invalid("every global sequence length must be divisible by 2*cp.size = " + str(chunks) + ", got length " +
              str(len) + " for sequence " + str(static_cast<int64_t>(n - 1)));
  }
}

}  // namespace

int64_t cp_global_position(const ContextParallel& cp, int64_t local_index, int64_t local_len) {
  check_cp(cp);
  check_local_len(cp, local_len);
  if (local_index < 0 || local_index >= local_len)
    invalid("local_index must be in [0, local_len = " + str(local_len) + "), got " + str(local_index));
  return map(cp, local_index, local_len);
}

std::vector<int64_t> cp_positions(const ContextParallel& cp, int64_t local_len, int64_t offset) {
  check_cp(cp);
  check_local_len(cp, local_len);
  if (offset < 0) invalid("offset must be >= 0, got " + str(offset));
  if (local_len > 0) {
    // The largest position is offset + local_len * cp.size - 1 (the end of the global sequence);
    // check_local_len made the product safe.
    int64_t last = 0;
    const bool overflow = __builtin_add_overflow(offset, local_len * cp.size - 1, &last);
    if (overflow || last >= kPositionLimit)
      fail(Kind::kOutOfRange, kWhere,
           "offset + local_len * cp.size - 1 (the last global position) must be < 2^31, got offset " + str(offset) +
               ", local_len " + str(local_len) + ", cp.size " + str(cp.size) +
               (overflow ? std::string(" (the sum overflows int64)") : " (last position " + str(last) + ")"));
  }
  std::vector<int64_t> out(static_cast<std::size_t>(local_len));
  for (int64_t s = 0; s < local_len; ++s) out[static_cast<std::size_t>(s)] = offset + map(cp, s, local_len);
  return out;
}

std::vector<int64_t> cp_local_cu_seqlens(const ContextParallel& cp, const std::vector<int64_t>& cu) {
  check_cp(cp);
  check_cu(cp, cu);
  std::vector<int64_t> out(cu.size());
  for (std::size_t n = 0; n < cu.size(); ++n) out[n] = cu[n] / cp.size;
  return out;
}

std::vector<int64_t> cp_positions_packed(const ContextParallel& cp, const std::vector<int64_t>& cu) {
  const std::vector<int64_t> local = cp_local_cu_seqlens(cp, cu);
  std::vector<int64_t> out(static_cast<std::size_t>(local.back()));
  for (std::size_t n = 0; n + 1 < local.size(); ++n) {
    const int64_t begin = local[n], len = local[n + 1] - local[n];
    for (int64_t s = 0; s < len; ++s) out[static_cast<std::size_t>(begin + s)] = map(cp, s, len);
  }
  return out;
}

CpLocation cp_locate(int64_t size, int64_t g, int64_t global_len) {
  if (size < 1) invalid("cp.size must be >= 1, got " + str(size));
  const int64_t chunks = twice(size, "cp.size");
  if (global_len < 0 || global_len % chunks != 0)
    invalid("global_len must be >= 0 and divisible by 2*cp.size = " + str(chunks) + ", got " + str(global_len));
  if (g < 0 || g >= global_len) invalid("global_position must be in [0, " + str(global_len) + "), got " + str(g));
  if (size == 1) return {0, g};
  const int64_t c = global_len / (2 * size);  // chunk length
  const int64_t chunk = g / c, within = g % c;
  if (chunk < size) return {chunk, within};
  return {2 * size - 1 - chunk, c + within};
}

}  // namespace rotary

// The backend interface: a validated, backend-neutral Plan of one apply call (built by the engine, consumed by backends).
#pragma once

#include <cstdint>
#include <vector>

#include "rotary/table.h"
#include "rotary/types.h"

namespace rotary::detail {

/// One tensor to rotate, with strides in ELEMENTS, already permuted to the canonical
/// (b, s, h, d) order whatever the user's layout (thd: b = 0 only, s = token).
struct PlanTensor {
  const void* in = nullptr;
  void* out = nullptr;  ///< == in for in-place
  int64_t heads = 0;
  int64_t in_sb = 0, in_ss = 0, in_sh = 0, in_sd = 1;
  int64_t out_sb = 0, out_ss = 0, out_sh = 0, out_sd = 1;
  bool is_k = false;  ///< the call's k (q with no heads leaves k as t[0]): errors name it so
  bool inplace() const { return in == out; }
};

/// Per-token position source. Host calls: validated, every index is in range. Device calls
/// (Plan::device): shapes, strides and dtypes are validated, values are not read on the host.
struct PlanPositions {
  enum class Kind { kOffset, kIds, kPerToken, kPacked } kind = Kind::kOffset;
  // kOffset: pos = offset + batch_offset(b) + s
  int64_t offset = 0;
  const void* batch_offsets = nullptr;  // i32/i64 [B] or null
  DType batch_offsets_dtype = DType::kI64;
  int64_t batch_offsets_stride = 1;
  // kIds: pos = ids[b*ids_sb + s*ids_ss] (+ axis*ids_sa for M-RoPE), any of i32/i64/f32/f64
  const void* ids = nullptr;
  DType ids_dtype = DType::kI64;
  int64_t ids_sb = 0, ids_ss = 0, ids_sa = 0;
  int n_axes = 1;  ///< position axes (1..kMaxPositionAxes): 3 for M-RoPE, 2 for 2-D vision, 4 for ggml multi-rope
  // kPerToken: packed batches resolved by the engine into one int64 per token (s index)
  std::vector<int64_t> per_token;
  // kPacked (device calls only; the host resolves packed batches into kPerToken): token s belongs to the
  // sequence n with cu[n] <= s < cu[n+1] (searched per token); pos = s - cu[n] + seq_offsets[n].
  const void* cu_seqlens = nullptr;  // i32/i64 [n_seq + 1]
  DType cu_seqlens_dtype = DType::kI64;
  int64_t cu_seqlens_stride = 1;
  int64_t n_seq = 0;
  const void* seq_offsets = nullptr;  // i32/i64 [n_seq] or null
  DType seq_offsets_dtype = DType::kI64;
  int64_t seq_offsets_stride = 1;

  bool fractional() const { return kind == Kind::kIds && (ids_dtype == DType::kF32 || ids_dtype == DType::kF64); }
};

/// Where cos/sin come from. Every source yields, per token, two f32 rows of `half` values
/// (attention factor already folded in).
struct PlanCosSin {
  enum class Kind { kTable, kCaller, kOnTheFly } kind = Kind::kTable;
  // kTable: rows of 2*half f32: [cos | sin], `table_size` rows (host memory). Device calls also set
  // `table_owner` (the device backend keeps its per-device copy of the rows with the table) and
  // inv_freq/attention_factor (positions past the rows copied so far are computed on the device).
  const float* table = nullptr;
  int64_t table_size = 0;
  const CosSinTable* table_owner = nullptr;
  // Device calls: the rows this call reads from the table (host-known positions: the largest + 1; device
  // positions: seq_len, 0 when not given). The backend grows its device copy only when it holds fewer;
  // positions past the copy's rows are computed on the device.
  int64_t device_rows = 0;
  // The View `table` comes from: it pins those rows (the table may grow and free its old block while
  // this plan runs). Whoever sets `table` from a table sets this too.
  CosSinTable::View table_pin;
  // kCaller: rank 2 => indexed by position; rank 3 => [B,S,half] gathered
  TensorView cos, sin;
  // kOnTheFly
  const double* inv_freq = nullptr;
  double attention_factor = 1.0;
  // Multi-axis (M-RoPE, vision, ggml): axis_of_freq[j] < pos.n_axes is the position axis frequency j uses
  // (size half), empty = off. Table sources need every axis position to be a table row.
  std::vector<uint8_t> axis_of_freq;
};

struct Plan {
  DType dtype = DType::kF32;
  Pairing pairing = Pairing::kHalfSplit;
  Direction direction = Direction::kForward;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;
  int64_t half = 0;  ///< rotary_dim / 2
  int64_t B = 0, S = 0;
  int ntensors = 0;
  PlanTensor t[2];
  PlanPositions pos;
  PlanCosSin cs;
  int threads = 0;  ///< as asked (>= 0): 0 = all usable cores; the CPU backend resolves and caps it
  /// Device call (backend cuda): every pointer above is device memory. The engine read no value behind
  /// them (positions, cu_seqlens, batch offsets), so none is range-checked on the host (docs/cuda.md).
  bool device = false;
  void* stream = nullptr;  ///< device calls: the caller's cudaStream_t
};

/// Returns pointers to token (b, s)'s cos row and sin row (`half` f32 each). Uses `scratch`
/// (at least 2*half floats) when the row must be computed/gathered/converted.
/// Shared by every CPU-side backend; cheap for the table source (no copy).
void resolve_cos_sin(const Plan& plan, int64_t b, int64_t s, float* scratch, const float** cos_row,
                     const float** sin_row);
/// The same with the positions, cos/sin source and half spelled out (a prologue call has one source per
/// sequence over one set of positions).
void resolve_cos_sin(const PlanPositions& pos, const PlanCosSin& cs, int64_t half, int64_t b, int64_t s,
                     float* scratch, const float** cos_row, const float** sin_row);
/// Integer position of token (b, s) on axis `axis` of `pos`.
int64_t token_position(const PlanPositions& pos, int64_t b, int64_t s, int axis = 0);

/// Integer position of token (b, s) on axis `axis` (kOffset / kIds-integer / kPerToken).
int64_t token_position(const Plan& plan, int64_t b, int64_t s, int axis = 0);
/// Fractional-capable position of token (b, s) on axis `axis`.
double token_position_f(const Plan& plan, int64_t b, int64_t s, int axis = 0);

// Backends. Each consumes a validated Plan; none validates.
void reference_apply(const Plan& plan);  // src/reference/
void cpu_apply(const Plan& plan);        // src/cpu/
void cuda_apply(const Plan& plan);       // src/cuda/ or src/no_cuda/ (throws kUnsupported)
bool cuda_available();

}  // namespace rotary::detail

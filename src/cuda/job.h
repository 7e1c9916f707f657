// Internal: the CUDA kernel's parameters (one plain Job per call, built from a Plan on the host) and its launch geometry.
#pragma once

#include <cstdint>

namespace rotary::detail {
struct Plan;
}

namespace rotary::detail::cuda {

/// On-the-fly frequencies and the multi-axis map travel in the kernel's parameters (no device
/// allocation per call, graph-capturable): at most this many pairs (rotary_dim <= 512).
inline constexpr int kMaxParamFreqs = 256;

enum class ElemType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };
/// Element type of position tensors and caller cos/sin (values of rotary::DType).
enum class ValueType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kF64 = 3, kI32 = 4, kI64 = 5 };

/// One tensor (q or k) in canonical (b, s, h, d) element strides.
struct TensorJob {
  const void* in;
  void* out;  ///< == in when rotated in place
  int64_t heads;
  int64_t in_sb, in_ss, in_sh, in_sd;
  int64_t out_sb, out_ss, out_sh, out_sd;
  int32_t copy_pass;  ///< out of place: channels >= rotary_dim are copied
};

enum class PosKind : int32_t { kOffset = 0, kIds = 1, kPacked = 2 };

/// Position of token (b, s) on an axis: the device side of PlanPositions (pointers are device memory).
struct PositionJob {
  PosKind kind;
  int32_t n_axes;
  int64_t offset;  ///< kOffset: offset + batch_offsets[b] + s
  const void* batch_offsets;
  ValueType batch_offsets_type;
  int64_t batch_offsets_stride;
  const void* ids;  ///< kIds: ids[axis*sa + b*sb + s*ss]
  ValueType ids_type;
  int64_t ids_sb, ids_ss, ids_sa;
  const void* cu_seqlens;  ///< kPacked: s - cu[n] + seq_offsets[n], cu[n] <= s < cu[n+1]
  ValueType cu_type;
  int64_t cu_stride, n_seq;
  const void* seq_offsets;
  ValueType seq_offsets_type;
  int64_t seq_offsets_stride;
};

enum class CosSinKind : int32_t { kTable = 0, kOnTheFly = 1, kCaller = 2 };

/// Where a token's cos/sin come from (attention factor folded in, as PlanCosSin says).
struct CosSinJob {
  CosSinKind kind;
  int32_t multi_axis;  ///< frequency j reads position axis axis_bits(j) (2 bits each)
  uint32_t axis_bits[kMaxParamFreqs / 16];
  /// kTable: device rows [cos | sin] of positions [0, table_rows); other positions are computed on the fly
  /// from `inv_freq` (a device copy of the table's frequencies).
  const float* table;
  int64_t table_rows;
  const double* inv_freq;  ///< kTable: device memory; kOnTheFly: null (the launch passes ParamFreqs)
  double attention_factor;
  /// kCaller: rank 2 [rows, half] indexed by position (a position outside [0, rows) gives NaN), or rank 3
  /// [B or 1, S, half] gathered per token.
  const void* cos;
  const void* sin;
  ValueType caller_type;
  int32_t caller_rank;
  int32_t caller_batch_broadcast;  ///< rank 3 with shape[0] == 1
  int64_t caller_rows;
  int64_t cos_s0, cos_s1, cos_sd, sin_s0, sin_s1, sin_sd;
};

/// Launch shape. Threads (x, y) of block (bx, by): chunk x of token bx*block_y + y; in head-parallel mode
/// block row by is head by of q then k, otherwise every thread walks all heads of its token.
struct Geometry {
  uint32_t grid_x, grid_y, block_x, block_y;
  int32_t head_parallel;
};

/// Everything one launch needs, passed by value as the kernel's parameter.
struct Job {
  ElemType elem;
  int32_t interleaved;
  int32_t vec;        ///< 16-byte accesses for whole chunks (alignment, unit channel strides, see make_job)
  int32_t vec_table;  ///< 16-byte loads of table rows (half % 4 == 0)
  int32_t vec_pass;   ///< 16-byte copies of pass-through chunks (rotary_dim % pairs_per_thread == 0)
  float sign;         ///< +1 forward, -1 inverse
  int64_t B, S, tokens, head_dim, rotary_dim, half;
  int32_t ntensors;
  TensorJob t[2];
  int64_t rows_per_token;  ///< q heads + k heads
  int32_t pairs_per_thread;  ///< W = 16 bytes / element size: one chunk is W pairs (2W elements)
  int32_t rot_chunks;        ///< ceil(half / W)
  int32_t pass_chunks;       ///< ceil((head_dim - rotary_dim) / 2W) when a tensor is out of place, else 0
  int32_t chunks;            ///< rot_chunks + pass_chunks: threads per row
  PositionJob pos;
  CosSinJob cs;
  Geometry geo;
};

/// On-the-fly frequencies (double), a second kernel parameter of on-the-fly launches only.
struct ParamFreqs {
  double inv_freq[kMaxParamFreqs];
};

/// What the launch geometry needs to know about the device.
struct DeviceLimits {
  int sm_count = 132;
  int max_threads_per_sm = 2048;  ///< threads of this kernel resident per SM (occupancy, registers included)
};

/// Device copies of a table's rows and frequencies (cuda::DeviceTables::rows_for).
struct DeviceRows {
  const float* rows = nullptr;
  int64_t n = 0;
  const double* inv_freq = nullptr;
};

/// The Job for a validated device plan (f32/f16/bf16; the caller checked the parameter limits).
/// Geometry is left for launch_geometry.
Job make_job(const Plan& plan, const DeviceRows& rows);

/// Threads per block: the geometry's target and its maximum (the kernels' launch bound); a row of more
/// chunks than this is walked by each thread in steps of block_x.
inline constexpr uint32_t kTargetBlockThreads = 256;

/// Token-parallel (each thread walks every head of its token, reusing cos/sin) when there are enough token
/// blocks to fill the device, head-parallel (one head per block row) otherwise: decode and short calls.
Geometry launch_geometry(const Job& job, const DeviceLimits& limits);

/// Fills `out` with the plan's on-the-fly frequencies (on-the-fly plans only).
void param_freqs(const Plan& plan, ParamFreqs* out);

}  // namespace rotary::detail::cuda

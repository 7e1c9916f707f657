// Host side of the CUDA kernel: a Plan turned into the kernel's Job, and the launch geometry (shared with the emulator).
#include "cuda/job.h"

#include <algorithm>
#include <cstring>

#include "plan/plan.h"

namespace rotary::detail::cuda {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// Every row start of the view is 16-byte aligned, and channels are contiguous.
bool rows_aligned(const void* base, int64_t sb, int64_t ss, int64_t sh, int64_t sd, int64_t B, int64_t S,
                  int64_t H, int64_t per16) {
  if (sd != 1 || !aligned16(base)) return false;
  auto ok = [per16](int64_t stride, int64_t extent) { return extent <= 1 || stride % per16 == 0; };
  return ok(sb, B) && ok(ss, S) && ok(sh, H);
}

ValueType value_type(DType d) { return static_cast<ValueType>(static_cast<int32_t>(d)); }

PositionJob position_job(const PlanPositions& p) {
  PositionJob j{};
  j.n_axes = p.n_axes;
  switch (p.kind) {
    case PlanPositions::Kind::kOffset:
      j.kind = PosKind::kOffset;
      j.offset = p.offset;
      j.batch_offsets = p.batch_offsets;
      j.batch_offsets_type = value_type(p.batch_offsets_dtype);
      j.batch_offsets_stride = p.batch_offsets_stride;
      break;
    case PlanPositions::Kind::kIds:
      j.kind = PosKind::kIds;
      j.ids = p.ids;
      j.ids_type = value_type(p.ids_dtype);
      j.ids_sb = p.ids_sb;
      j.ids_ss = p.ids_ss;
      j.ids_sa = p.ids_sa;
      break;
    case PlanPositions::Kind::kPacked:
      j.kind = PosKind::kPacked;
      j.cu_seqlens = p.cu_seqlens;
      j.cu_type = value_type(p.cu_seqlens_dtype);
      j.cu_stride = p.cu_seqlens_stride;
      j.n_seq = p.n_seq;
      j.seq_offsets = p.seq_offsets;
      j.seq_offsets_type = value_type(p.seq_offsets_dtype);
      j.seq_offsets_stride = p.seq_offsets_stride;
      break;
    case PlanPositions::Kind::kPerToken:  // host plans only: the engine keeps packed batches on the device
      fail(Error::Kind::kInternal, "rotary_apply", "a device plan with host-resolved packed positions, got kPerToken");
  }
  return j;
}

}  // namespace

Job make_job(const Plan& plan, const DeviceRows& rows) {
  Job j{};
  j.elem = plan.dtype == DType::kF16 ? ElemType::kF16 : plan.dtype == DType::kBF16 ? ElemType::kBF16 : ElemType::kF32;
  j.interleaved = plan.pairing == Pairing::kInterleaved;
  j.sign = plan.direction == Direction::kForward ? 1.0f : -1.0f;
  j.B = plan.B;
  j.S = plan.S;
  j.tokens = plan.B * plan.S;
  j.head_dim = plan.head_dim;
  j.rotary_dim = plan.rotary_dim;
  j.half = plan.half;
  const int64_t per16 = 16 / static_cast<int64_t>(dtype_size(plan.dtype));  // W: elements per 16 bytes
  j.pairs_per_thread = static_cast<int32_t>(per16);
  j.ntensors = plan.ntensors;
  bool vec = plan.pairing == Pairing::kInterleaved || plan.half % per16 == 0;  // half-split: x1 runs aligned too
  bool any_pass = false;
  for (int i = 0; i < plan.ntensors; ++i) {
    const PlanTensor& p = plan.t[i];
    TensorJob& t = j.t[i];
    t.in = p.in;
    t.out = p.out;
    t.heads = p.heads;
    t.in_sb = p.in_sb; t.in_ss = p.in_ss; t.in_sh = p.in_sh; t.in_sd = p.in_sd;
    t.out_sb = p.out_sb; t.out_ss = p.out_ss; t.out_sh = p.out_sh; t.out_sd = p.out_sd;
    t.copy_pass = !p.inplace() && plan.rotary_dim < plan.head_dim;
    any_pass = any_pass || t.copy_pass;
    j.rows_per_token += p.heads;
    vec = vec && rows_aligned(p.in, p.in_sb, p.in_ss, p.in_sh, p.in_sd, plan.B, plan.S, p.heads, per16) &&
          rows_aligned(p.out, p.out_sb, p.out_ss, p.out_sh, p.out_sd, plan.B, plan.S, p.heads, per16);
  }
  j.vec = vec;
  j.vec_pass = vec && plan.rotary_dim % per16 == 0;
  j.rot_chunks = static_cast<int32_t>((plan.half + per16 - 1) / per16);
  j.pass_chunks = any_pass ? static_cast<int32_t>((plan.head_dim - plan.rotary_dim + 2 * per16 - 1) / (2 * per16)) : 0;
  j.chunks = j.rot_chunks + j.pass_chunks;
  j.pos = position_job(plan.pos);

  const PlanCosSin& cs = plan.cs;
  CosSinJob& c = j.cs;
  c.attention_factor = cs.attention_factor;
  c.multi_axis = !cs.axis_of_freq.empty();
  for (std::size_t f = 0; f < cs.axis_of_freq.size(); ++f)
    c.axis_bits[f >> 4] |= static_cast<uint32_t>(cs.axis_of_freq[f] & 3u) << ((f & 15) * 2);
  switch (cs.kind) {
    case PlanCosSin::Kind::kTable:
      c.kind = CosSinKind::kTable;
      c.table = rows.rows;
      c.table_rows = rows.n;
      c.inv_freq = rows.inv_freq;
      j.vec_table = plan.half % 4 == 0 && aligned16(rows.rows);
      break;
    case PlanCosSin::Kind::kOnTheFly: c.kind = CosSinKind::kOnTheFly; break;
    case PlanCosSin::Kind::kCaller: {
      c.kind = CosSinKind::kCaller;
      c.cos = cs.cos.data;
      c.sin = cs.sin.data;
      c.caller_type = value_type(cs.cos.dtype);
      c.caller_rank = cs.cos.rank;
      if (cs.cos.rank == 2) {
        c.caller_rows = cs.cos.shape[0];
        c.cos_s0 = cs.cos.strides[0];
        c.cos_sd = cs.cos.strides[1];
        c.sin_s0 = cs.sin.strides[0];
        c.sin_sd = cs.sin.strides[1];
      } else {
        c.caller_batch_broadcast = cs.cos.shape[0] == 1;
        c.cos_s0 = cs.cos.strides[0];
        c.cos_s1 = cs.cos.strides[1];
        c.cos_sd = cs.cos.strides[2];
        c.sin_s0 = cs.sin.strides[0];
        c.sin_s1 = cs.sin.strides[1];
        c.sin_sd = cs.sin.strides[2];
      }
      break;
    }
  }
  return j;
}

Geometry launch_geometry(const Job& job, const DeviceLimits& limits) {
  Geometry g{};
  g.block_x = static_cast<uint32_t>(std::min<int64_t>(job.chunks, kTargetBlockThreads));  // more: threads loop
  const int64_t rows_wanted = std::max<int64_t>(1, kTargetBlockThreads / g.block_x);
  g.block_y = static_cast<uint32_t>(std::max<int64_t>(1, std::min<int64_t>(rows_wanted, job.tokens)));
  const int64_t token_blocks = (job.tokens + g.block_y - 1) / g.block_y;
  const int64_t threads = static_cast<int64_t>(g.block_x) * g.block_y;
  const int64_t resident = static_cast<int64_t>(limits.sm_count) * std::max<int64_t>(1, limits.max_threads_per_sm / threads);
  g.head_parallel = token_blocks < resident && job.rows_per_token > 1 && job.rows_per_token <= 65535;
  g.grid_x = static_cast<uint32_t>(token_blocks);
  g.grid_y = g.head_parallel ? static_cast<uint32_t>(job.rows_per_token) : 1;
  return g;
}

void param_freqs(const Plan& plan, ParamFreqs* out) {
  std::memset(out, 0, sizeof *out);
  std::copy(plan.cs.inv_freq, plan.cs.inv_freq + plan.half, out->inv_freq);
}

}  // namespace rotary::detail::cuda

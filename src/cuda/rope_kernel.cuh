// The CUDA kernel body: one thread's work as a __host__ __device__ function of explicit (block, thread) indices.
//
// A row is one head of one token; a chunk is W = 16 bytes / element size consecutive pairs (half-split:
// x[j0, j0+W) and x[j0+half, j0+half+W); interleaved: x[2j0, 2j0+2W)), i.e. two 16-byte vectors in and two
// out, or one chunk of 2W pass-through channels. Thread x of a block row handles chunk x of its token's rows:
// cos/sin for the chunk's W pairs are formed once and reused across the heads the thread walks. A partial
// last chunk, non-unit channel strides and misaligned views take the scalar path of the same function.
// No thread reads what another writes, and there is no shared memory or barrier: the emulator may run the
// threads in any order.
#pragma once

#include "cuda/compat.cuh"
#include "cuda/job.h"

namespace rotary::detail::cuda {

template <ElemType E>
struct Elem;

template <>
struct Elem<ElemType::kF32> {
  using Bits = uint32_t;
  static constexpr int kPerPack = 4;
  ROTARY_HD static float load(const void* base, int64_t i) { return static_cast<const float*>(base)[i]; }
  ROTARY_HD static void store(void* base, int64_t i, float v) { static_cast<float*>(base)[i] = v; }
  ROTARY_HD static void unpack(const Pack16& p, float* out) {
    ROTARY_UNROLL
    for (int i = 0; i < 4; ++i) out[i] = bits_f32(p.w[i]);
  }
  ROTARY_HD static Pack16 pack(const float* in) {
    Pack16 p;
    ROTARY_UNROLL
    for (int i = 0; i < 4; ++i) p.w[i] = f32_bits(in[i]);
    return p;
  }
};

template <ElemType E>
struct Elem16 {  // f16 and bf16: 8 elements per 16 bytes
  using Bits = uint16_t;
  static constexpr int kPerPack = 8;
  ROTARY_HD static float to_f32(uint16_t b) { return E == ElemType::kBF16 ? bf16_to_f32(b) : f16_to_f32(b); }
  ROTARY_HD static uint16_t from_f32(float v) { return E == ElemType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v); }
  ROTARY_HD static float load(const void* base, int64_t i) { return to_f32(static_cast<const uint16_t*>(base)[i]); }
  ROTARY_HD static void store(void* base, int64_t i, float v) { static_cast<uint16_t*>(base)[i] = from_f32(v); }
  ROTARY_HD static void unpack(const Pack16& p, float* out) {
    ROTARY_UNROLL
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = to_f32(static_cast<uint16_t>(p.w[i] & 0xFFFFu));
      out[2 * i + 1] = to_f32(static_cast<uint16_t>(p.w[i] >> 16));
    }
  }
  ROTARY_HD static Pack16 pack(const float* in) {
    Pack16 p;
    ROTARY_UNROLL
    for (int i = 0; i < 4; ++i)
      p.w[i] = static_cast<uint32_t>(from_f32(in[2 * i])) | (static_cast<uint32_t>(from_f32(in[2 * i + 1])) << 16);
    return p;
  }
};
template <>
struct Elem<ElemType::kF16> : Elem16<ElemType::kF16> {};
template <>
struct Elem<ElemType::kBF16> : Elem16<ElemType::kBF16> {};

// ------------------------------------------------------------------ positions

ROTARY_HD int64_t load_int(const void* base, ValueType t, int64_t i) {
  switch (t) {
    case ValueType::kI32: return static_cast<const int32_t*>(base)[i];
    case ValueType::kI64: return static_cast<const int64_t*>(base)[i];
    case ValueType::kF32: return static_cast<int64_t>(floor_f64(static_cast<const float*>(base)[i]));
    case ValueType::kF64: return static_cast<int64_t>(floor_f64(static_cast<const double*>(base)[i]));
    default: return 0;
  }
}

ROTARY_HD double load_f64(const void* base, ValueType t, int64_t i) {
  switch (t) {
    case ValueType::kF32: return static_cast<const float*>(base)[i];
    case ValueType::kF64: return static_cast<const double*>(base)[i];
    case ValueType::kF16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case ValueType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<double>(load_int(base, t, i));
  }
}

/// Integer position of token (b, s) on `axis` (fractional ids: floor).
ROTARY_HD int64_t position(const PositionJob& p, int64_t b, int64_t s, int axis) {
  switch (p.kind) {
    case PosKind::kOffset:
      return p.offset + (p.batch_offsets ? load_int(p.batch_offsets, p.batch_offsets_type, b * p.batch_offsets_stride) : 0) + s;
    case PosKind::kIds:
      return load_int(p.ids, p.ids_type, (p.n_axes > 1 ? axis : 0) * p.ids_sa + b * p.ids_sb + s * p.ids_ss);
    case PosKind::kPacked: {
      if (p.n_seq <= 0) return s;  // malformed (tokens but no sequence): not checked on device calls
      int64_t lo = 0, hi = p.n_seq - 1;  // the last sequence n with cu[n] <= s
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (load_int(p.cu_seqlens, p.cu_type, mid * p.cu_stride) <= s) lo = mid;
        else hi = mid - 1;
      }
      const int64_t off = p.seq_offsets ? load_int(p.seq_offsets, p.seq_offsets_type, lo * p.seq_offsets_stride) : 0;
      return s - load_int(p.cu_seqlens, p.cu_type, lo * p.cu_stride) + off;
    }
  }
  return 0;
}

/// Position as a double (fractional ids keep their fraction).
ROTARY_HD double position_f(const PositionJob& p, int64_t b, int64_t s, int axis) {
  if (p.kind == PosKind::kIds && (p.ids_type == ValueType::kF32 || p.ids_type == ValueType::kF64))
    return load_f64(p.ids, p.ids_type, (p.n_axes > 1 ? axis : 0) * p.ids_sa + b * p.ids_sb + s * p.ids_ss);
  return static_cast<double>(position(p, b, s, axis));
}

ROTARY_HD int axis_of(const CosSinJob& cs, int64_t j) {
  return cs.multi_axis ? static_cast<int>((cs.axis_bits[j >> 4] >> ((j & 15) * 2)) & 3u) : 0;
}

// ------------------------------------------------------------------ cos/sin of a chunk

/// cos/sin of frequency j at position p, exactly as compute_cos_sin_row: double angle, double sin/cos,
/// attention factor in double, one rounding to f32.
ROTARY_HD void angle_cos_sin(double p, double inv_freq, double af, float* c, float* s) {
  double sv, cv;
  sincos_f64(p * inv_freq, &sv, &cv);
  *c = static_cast<float>(cv * af);
  *s = static_cast<float>(sv * af);
}

/// Fills c[0, n), s[0, n) for pairs [j0, j0 + n) of token (b, s); entries [n, W) are zero. Loops run to
/// the constant W with `i < n` guards, so that c and s stay in registers (no run-time array index).
template <int W>
ROTARY_HD void chunk_cos_sin(const Job& job, const double* param_freqs, int64_t b, int64_t s, int64_t j0, int n,
                             float* c, float* sn) {
  const CosSinJob& cs = job.cs;
  const int64_t h = job.half;
  ROTARY_UNROLL
  for (int i = 0; i < W; ++i) c[i] = sn[i] = 0.0f;
  switch (cs.kind) {
    case CosSinKind::kTable: {
      if (!cs.multi_axis) {
        const int64_t p = position(job.pos, b, s, 0);
        if (p >= 0 && p < cs.table_rows) {
          const float* row = cs.table + p * 2 * h;
          if (job.vec_table && n == W) {
            ROTARY_UNROLL
            for (int k = 0; k < W / 4; ++k) {
              const Pack16 pc = load16(row + j0 + 4 * k), ps = load16(row + h + j0 + 4 * k);
              ROTARY_UNROLL
              for (int i = 0; i < 4; ++i) {
                c[4 * k + i] = bits_f32(pc.w[i]);
                sn[4 * k + i] = bits_f32(ps.w[i]);
              }
            }
          } else {
            ROTARY_UNROLL
            for (int i = 0; i < W; ++i)
              if (i < n) {
                c[i] = row[j0 + i];
                sn[i] = row[h + j0 + i];
              }
          }
        } else {  // past the rows on the device: the same row, computed here
          ROTARY_UNROLL
          for (int i = 0; i < W; ++i)
            if (i < n) angle_cos_sin(static_cast<double>(p), cs.inv_freq[j0 + i], cs.attention_factor, &c[i], &sn[i]);
        }
        return;
      }
      ROTARY_UNROLL
      for (int i = 0; i < W; ++i) {
        if (i >= n) break;
        const int64_t j = j0 + i;
        const int64_t p = position(job.pos, b, s, axis_of(cs, j));
        if (p >= 0 && p < cs.table_rows) {
          c[i] = cs.table[p * 2 * h + j];
          sn[i] = cs.table[p * 2 * h + h + j];
        } else {
          angle_cos_sin(static_cast<double>(p), cs.inv_freq[j], cs.attention_factor, &c[i], &sn[i]);
        }
      }
      return;
    }
    case CosSinKind::kOnTheFly: {
      const double p0 = position_f(job.pos, b, s, 0);
      ROTARY_UNROLL
      for (int i = 0; i < W; ++i) {
        if (i >= n) break;
        const int64_t j = j0 + i;
        const double p = cs.multi_axis ? position_f(job.pos, b, s, axis_of(cs, j)) : p0;
        angle_cos_sin(p, param_freqs[j], cs.attention_factor, &c[i], &sn[i]);
      }
      return;
    }
    case CosSinKind::kCaller: {
      int64_t co, so;
      if (cs.caller_rank == 2) {
        const int64_t p = position(job.pos, b, s, 0);
        if (p < 0 || p >= cs.caller_rows) {  // not checkable on the host for device positions: NaN, never identity
          ROTARY_UNROLL
          for (int i = 0; i < W; ++i) c[i] = sn[i] = quiet_nan();
          return;
        }
        co = p * cs.cos_s0;
        so = p * cs.sin_s0;
      } else {
        const int64_t bb = cs.caller_batch_broadcast ? 0 : b;
        co = bb * cs.cos_s0 + s * cs.cos_s1;
        so = bb * cs.sin_s0 + s * cs.sin_s1;
      }
      ROTARY_UNROLL
      for (int i = 0; i < W; ++i)
        if (i < n) {
          c[i] = static_cast<float>(load_f64(cs.cos, cs.caller_type, co + (j0 + i) * cs.cos_sd));
          sn[i] = static_cast<float>(load_f64(cs.sin, cs.caller_type, so + (j0 + i) * cs.sin_sd));
        }
      return;
    }
  }
}

// ------------------------------------------------------------------ rows

/// Which tensor and head block row r (of q's heads, then k's) is.
ROTARY_HD const TensorJob& row_tensor(const Job& job, int64_t r, int64_t* head) {
  if (job.ntensors > 1 && r >= job.t[0].heads) {
    *head = r - job.t[0].heads;
    return job.t[1];
  }
  *head = r;
  return job.t[0];
}

/// y0 = x0*c - x1*s, y1 = x0*s + x1*c (s already carries the direction's sign).
ROTARY_HD void rotate(float x0, float x1, float c, float s, float* y0, float* y1) {
  *y0 = fma_f32(x0, c, -(x1 * s));
  *y1 = fma_f32(x0, s, x1 * c);
}

/// Rotates one whole chunk held in two packs (half-split: the x0 run and the x1 run; interleaved: 2W
/// consecutive elements) and stores it at out / out + second.
template <ElemType E, bool kInter>
ROTARY_HD void rotate_packs(const Pack16& a, const Pack16& b, const float* c, const float* sn,
                            typename Elem<E>::Bits* out, int64_t second) {
  using T = Elem<E>;
  constexpr int W = T::kPerPack;
  float e0[W], e1[W], y0[W], y1[W];
  T::unpack(a, e0);
  T::unpack(b, e1);
  if (kInter) {  // pairs (e[2i], e[2i+1]) of the 2W elements e0 ++ e1
    ROTARY_UNROLL
    for (int i = 0; i < W / 2; ++i) {
      rotate(e0[2 * i], e0[2 * i + 1], c[i], sn[i], &y0[2 * i], &y0[2 * i + 1]);
      rotate(e1[2 * i], e1[2 * i + 1], c[W / 2 + i], sn[W / 2 + i], &y1[2 * i], &y1[2 * i + 1]);
    }
  } else {
    ROTARY_UNROLL
    for (int i = 0; i < W; ++i) rotate(e0[i], e1[i], c[i], sn[i], &y0[i], &y1[i]);
  }
  store16(out, T::pack(y0));
  store16(out + second, T::pack(y1));
}

/// Whole chunks with 16-byte accesses, two rows at a time so that four loads are in flight before the
/// first use (rows never overlap: the engine validated that).
template <ElemType E, bool kInter>
ROTARY_HD void rotate_rows_vec(const Job& job, int64_t b, int64_t s, int64_t j0, const float* c, const float* sn,
                               int64_t r0, int64_t r1) {
  using Bits = typename Elem<E>::Bits;
  constexpr int W = Elem<E>::kPerPack;
  const int64_t second = kInter ? W : job.half;  // element offset of the second pack
  const int64_t first = kInter ? 2 * j0 : j0;
  auto row = [&](int64_t r, const Bits** in, Bits** out) {
    int64_t head;
    const TensorJob& t = row_tensor(job, r, &head);
    *in = static_cast<const Bits*>(t.in) + b * t.in_sb + s * t.in_ss + head * t.in_sh + first;
    *out = static_cast<Bits*>(t.out) + b * t.out_sb + s * t.out_ss + head * t.out_sh + first;
  };
  int64_t r = r0;
  for (; r + 1 < r1; r += 2) {
    const Bits *in0, *in1;
    Bits *out0, *out1;
    row(r, &in0, &out0);
    row(r + 1, &in1, &out1);
    const Pack16 a0 = load16(in0), b0 = load16(in0 + second), a1 = load16(in1), b1 = load16(in1 + second);
    rotate_packs<E, kInter>(a0, b0, c, sn, out0, second);
    rotate_packs<E, kInter>(a1, b1, c, sn, out1, second);
  }
  if (r < r1) {
    const Bits* in0;
    Bits* out0;
    row(r, &in0, &out0);
    rotate_packs<E, kInter>(load16(in0), load16(in0 + second), c, sn, out0, second);
  }
}

/// Any chunk, element by element with the channel strides (partial chunks, strided or misaligned views).
template <ElemType E, bool kInter>
ROTARY_HD void rotate_rows_scalar(const Job& job, int64_t b, int64_t s, int64_t j0, int n, const float* c,
                                  const float* sn, int64_t r0, int64_t r1) {
  using T = Elem<E>;
  constexpr int W = T::kPerPack;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t head;
    const TensorJob& t = row_tensor(job, r, &head);
    const int64_t in0 = b * t.in_sb + s * t.in_ss + head * t.in_sh;
    const int64_t out0 = b * t.out_sb + s * t.out_ss + head * t.out_sh;
    ROTARY_UNROLL
    for (int i = 0; i < W; ++i) {
      if (i >= n) break;
      const int64_t j = j0 + i;
      const int64_t i0 = kInter ? 2 * j : j, i1 = kInter ? 2 * j + 1 : j + job.half;
      const float x0 = T::load(t.in, in0 + i0 * t.in_sd), x1 = T::load(t.in, in0 + i1 * t.in_sd);
      float y0, y1;
      rotate(x0, x1, c[i], sn[i], &y0, &y1);
      T::store(t.out, out0 + i0 * t.out_sd, y0);
      T::store(t.out, out0 + i1 * t.out_sd, y1);
    }
  }
}

/// Pass-through chunk pc: channels [rotary_dim + 2W*pc, +2W) of the out-of-place rows, copied bit for bit.
template <ElemType E, bool kVec>
ROTARY_HD void copy_rows(const Job& job, int64_t b, int64_t s, int64_t pc, int64_t r0, int64_t r1) {
  using T = Elem<E>;
  using Bits = typename T::Bits;
  constexpr int W = T::kPerPack;
  const int64_t e0 = job.rotary_dim + 2 * W * pc;
  const int64_t n = job.head_dim - e0 < 2 * W ? job.head_dim - e0 : 2 * W;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t head;
    const TensorJob& t = row_tensor(job, r, &head);
    if (!t.copy_pass) continue;
    const Bits* in = static_cast<const Bits*>(t.in) + b * t.in_sb + s * t.in_ss + head * t.in_sh;
    Bits* out = static_cast<Bits*>(t.out) + b * t.out_sb + s * t.out_ss + head * t.out_sh;
    if (kVec && job.vec_pass && n == 2 * W) {  // vec_pass implies the chunk start is 16-byte aligned
      const Pack16 x = load16(in + e0), y = load16(in + e0 + W);
      store16(out + e0, x);
      store16(out + e0 + W, y);
    } else {
      for (int64_t d = e0; d < e0 + n; ++d) out[d * t.out_sd] = in[d * t.in_sd];
    }
  }
}

/// One thread of the launch: block (bx, by), thread (tx, ty) of the geometry in job.geo. `param_freqs`:
/// the on-the-fly frequencies (ParamFreqs) of on-the-fly launches, unused otherwise.
template <ElemType E, bool kInter, bool kVec>
ROTARY_HD void rope_thread(const Job& job, const double* param_freqs, uint32_t bx, uint32_t by, uint32_t tx,
                           uint32_t ty) {
  constexpr int W = Elem<E>::kPerPack;
  const int64_t token = static_cast<int64_t>(bx) * job.geo.block_y + ty;
  if (token >= job.tokens) return;
  const int64_t b = job.B == 1 ? 0 : token / job.S;
  const int64_t s = token - b * job.S;
  const int64_t r0 = job.geo.head_parallel ? by : 0;
  const int64_t r1 = job.geo.head_parallel ? r0 + 1 : job.rows_per_token;
  for (int64_t chunk = tx; chunk < job.chunks; chunk += job.geo.block_x) {
    if (chunk >= job.rot_chunks) {
      copy_rows<E, kVec>(job, b, s, chunk - job.rot_chunks, r0, r1);
      continue;
    }
    const int64_t j0 = chunk * W;
    const int n = job.half - j0 < W ? static_cast<int>(job.half - j0) : W;
    float c[W], sn[W];
    chunk_cos_sin<W>(job, param_freqs, b, s, j0, n, c, sn);
    ROTARY_UNROLL
    for (int i = 0; i < W; ++i) sn[i] *= job.sign;
    if constexpr (kVec) {
      if (n == W) {
        rotate_rows_vec<E, kInter>(job, b, s, j0, c, sn, r0, r1);
        continue;
      }
    }
    rotate_rows_scalar<E, kInter>(job, b, s, j0, n, c, sn, r0, r1);
  }
}

/// Calls f.template run<E, kInter, kVec>() for the job's element type, pairing and access width: the one
/// dispatch shared by the CUDA launcher and the host emulator.
template <class F>
void dispatch(const Job& job, F& f) {
  const bool inter = job.interleaved != 0, vec = job.vec != 0;
  switch (job.elem) {
    case ElemType::kF32:
      if (inter) vec ? f.template run<ElemType::kF32, true, true>() : f.template run<ElemType::kF32, true, false>();
      else vec ? f.template run<ElemType::kF32, false, true>() : f.template run<ElemType::kF32, false, false>();
      return;
    case ElemType::kF16:
      if (inter) vec ? f.template run<ElemType::kF16, true, true>() : f.template run<ElemType::kF16, true, false>();
      else vec ? f.template run<ElemType::kF16, false, true>() : f.template run<ElemType::kF16, false, false>();
      return;
    case ElemType::kBF16:
      if (inter) vec ? f.template run<ElemType::kBF16, true, true>() : f.template run<ElemType::kBF16, true, false>();
      else vec ? f.template run<ElemType::kBF16, false, true>() : f.template run<ElemType::kBF16, false, false>();
      return;
  }
}

}  // namespace rotary::detail::cuda

// The prologue's planning shortcut for the common call (paged or contiguous caches): only the checks it cannot pass by construction.
#include <cmath>
#include <cstdint>

#include "core/freqs_internal.h"
#include "engine/fast_plan.h"
#include "engine/prologue_build.h"
#include "engine/prologue_checks.h"
#include "engine/tensor_checks.h"

namespace rotary {
namespace detail {
namespace {

constexpr const char* kWhere = kPrologueWhere;

/// [lo, lo + bytes) of a dense view.
struct Extent {  // trivial: the arrays of them below are not zeroed first
  uintptr_t lo, hi;
  bool meets(const Extent& o) const { return lo < o.hi && o.lo < hi; }
};
Extent extent(const TensorView& v, int64_t bytes) {
  const auto lo = reinterpret_cast<uintptr_t>(v.data);
  return {lo, lo + static_cast<uintptr_t>(bytes)};
}

}  // namespace

bool build_prologue_plan_fast(const PrologueArgs& a, ProloguePlan* plan) {
  // Pure tests first: nothing is written and nothing throws until every one has passed.
  const int li = static_cast<int>(a.layout), ci = static_cast<int>(a.cache_layout);
  if ((a.backend != Backend::kAuto && a.backend != Backend::kCpu) || li < 0 || li > 2 || ci < 0 || ci > 3 || a.threads < 0)
    return false;
  if (a.sources.size() != 1 || !absent(a.source_index)) return false;
  const FrequencySource& fs = a.sources[0];
  if (fs.rope == nullptr || (fs.seq_len && (*fs.seq_len <= 0 || *fs.seq_len > kMaxSeqLen))) return false;
  const Spec& spec = fs.rope->spec();
  if (spec.mrope.enabled()) return false;
  if (absent(a.q) || !absent(a.q_out) || !absent(a.k_out) || absent(a.v) || absent(a.k_cache) || absent(a.v_cache))
    return false;
  // Paged caches: thd tokens addressed by a dense i64 slot_mapping [T]. Contiguous caches: cache_positions
  // absent or a dense i64 [N] (N sequences: 1 in thd, B in bshd / bhsd).
  const bool paged = is_paged(a.cache_layout);
  if (paged ? (a.layout != Layout::kTHD || !absent(a.cache_positions)) : !absent(a.slot_mapping)) return false;
  if (!std::isfinite(a.norm_eps) || a.norm_eps < 0 || !std::isfinite(a.norm_offset)) return false;
  const int rank = expected_rank(a.layout);
  int64_t qb = 0, kb = 0, vb = 0, kcb = 0, vcb = 0, ab = 0;
  if (!dense_view(a.q, rank, &qb) || !dense_view(a.k, rank, &kb) || !dense_view(a.v, rank, &vb)) return false;
  const DType dt = a.q.dtype;
  if ((dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16) || a.k.dtype != dt || a.v.dtype != dt) return false;
  const Canon cq = canonical(a.q, a.layout), ck = canonical(a.k, a.layout), cv = canonical(a.v, a.layout);
  const int64_t T = cq.B * cq.S, D = cq.D, Hkv = ck.H, Dv = cv.D;
  if (ck.B != cq.B || ck.S != cq.S || ck.D != D || cv.B != cq.B || cv.S != cq.S || cv.H != Hkv || D != spec.head_dim)
    return false;
  const TensorView &kc = a.k_cache, &vc = a.v_cache;
  if (!dense_view(kc, 4, &kcb) || !dense_view(vc, 4, &vcb) || vc.dtype != kc.dtype) return false;
  const int head_axis = a.cache_layout == CacheLayout::kNHD || a.cache_layout == CacheLayout::kBSHD ? 2 : 1;
  if (kc.shape[head_axis] != Hkv || kc.shape[3] != D || vc.shape[0] != kc.shape[0] || vc.shape[1] != kc.shape[1] ||
      vc.shape[2] != kc.shape[2] || vc.shape[3] != Dv)
    return false;
  const bool i8 = kc.dtype == DType::kI8, fp8 = is_fp8(kc.dtype);
  if (!i8 && !fp8 && kc.dtype != DType::kF32 && kc.dtype != DType::kF16 && kc.dtype != DType::kBF16) return false;
  const TensorView& addr = paged ? a.slot_mapping : a.cache_positions;  // what addresses the cache rows
  const int64_t n_addr = paged ? T : (a.layout == Layout::kTHD ? 1 : cq.B);
  if (!absent(addr) && (!dense_view(addr, 1, &ab) || addr.dtype != DType::kI64 || addr.shape[0] != n_addr)) return false;
  if (paged && absent(addr)) return false;
  // Everything written (q in place, the caches, i8 scales) touches nothing else of the call; q, k and v
  // are apart (as the apply checks require of q and k). Else the full validation decides.
  Extent writes[5], reads[7];
  int nw = 0, nr = 0;
  writes[nw++] = extent(a.q, qb);
  writes[nw++] = extent(kc, kcb);
  writes[nw++] = extent(vc, vcb);
  reads[nr++] = extent(a.k, kb);
  reads[nr++] = extent(a.v, vb);
  if (!absent(addr)) reads[nr++] = extent(addr, ab);
  for (const TensorView* w : {&a.q_norm_weight, &a.k_norm_weight}) {
    int64_t bytes = 0;
    if (absent(*w)) continue;
    if (!dense_view(*w, 1, &bytes)) return false;
    reads[nr++] = extent(*w, bytes);
  }
  for (const TensorView* sc : {&a.k_scale, &a.v_scale}) {
    int64_t bytes = 0;
    if (absent(*sc)) {
      if (i8 || fp8) return false;
      continue;
    }
    if (!(i8 || fp8) || sc->dtype != DType::kF32 || sc->rank < 0 || sc->rank > kMaxRank || !dense_view(*sc, sc->rank, &bytes))
      return false;
    (i8 ? writes[nw++] : reads[nr++]) = extent(*sc, bytes);
  }
  if (reads[0].meets(reads[1])) return false;  // k and v
  for (int i = 0; i < nw; ++i) {
    for (int j = i + 1; j < nw; ++j)
      if (writes[i].meets(writes[j])) return false;
    for (int j = 0; j < nr; ++j)
      if (writes[i].meets(reads[j])) return false;
  }
  // The rotation of q and k (k read, its rows to the cache): the plan the apply planner's shortcut makes
  // of the request the full validation builds (rotation_request), after that shortcut's checks — q and k
  // dense floating tensors apart, q in place (above), offset positions, the spec's rotary_dim.
  const Positions& pos = a.positions;
  const int64_t R = spec.effective_rotary_dim();
  const int pairing_i = static_cast<int>(spec.pairing);
  int64_t last = 0;
  if (!offset_rotation_fits(pos, cq.S, R, D, &last) || pairing_i < 0 || pairing_i > 1) return false;
  OffsetRotation rot;
  rot.q = rot.q_out = &a.q;
  rot.k = rot.k_out = &a.k;
  rot.cq = &cq;
  rot.ck = &ck;
  rot.layout = a.layout;
  rot.pairing = spec.pairing;
  rot.rotary_dim = R;
  rot.offset = pos.offset;
  rot.last = last;
  rot.threads = a.threads;
  ProloguePlan& p = *plan;
  PositionRange range;
  plan_offset_rotation(rot, &p.rope, &range);
  // From here on: the full validation's own checks, in its order.
  p.q_index = 0;
  p.k_index = 1;
  p.hkv = Hkv;
  p.rotate = true;
  p.has_v = true;
  p.v.in = a.v.data;
  p.v.out = nullptr;
  p.v.heads = cv.H;
  p.v.in_sb = cv.sb; p.v.in_ss = cv.ss; p.v.in_sh = cv.sh; p.v.in_sd = cv.sd;
  p.v_dim = Dv;
  if (!absent(a.q_norm_weight)) p.q_norm = norm_weight(a.q_norm_weight, "q_norm_weight", D, a.norm_offset, kWhere, &p.q_norm_storage);
  if (!absent(a.k_norm_weight)) p.k_norm = norm_weight(a.k_norm_weight, "k_norm_weight", D, a.norm_offset, kWhere, &p.k_norm_storage);
  p.eps = static_cast<float>(a.norm_eps);
  int64_t major = 0, v_major = 0;
  // The caches and scales are dense (dense_view above): their view and self-overlap checks pass.
  cache_rows(kc, a.cache_layout, "k_cache", Hkv, D, kWhere, &major, &p.k_cache, /*dense=*/true);
  cache_rows(vc, a.cache_layout, "v_cache", Hkv, Dv, kWhere, &v_major, &p.v_cache, /*dense=*/true);
  attach_scale(p.k_cache, a.k_scale, kc, a.cache_layout, "k_scale", "k_cache", kWhere, /*dense=*/true);
  attach_scale(p.v_cache, a.v_scale, vc, a.cache_layout, "v_scale", "v_cache", kWhere, /*dense=*/true);
  if (paged) {
    p.slots = static_cast<const int64_t*>(addr.data);
    check_slots(p.slots, T, major * p.k_cache.minor_count, "slot_mapping", "num_blocks * block_size", kWhere);
  } else {
    Sequences seqs;
    seqs.count = n_addr;
    contiguous_slots(a, seqs, major, p);
  }
  static const Sequences kUnread;  // read only with a source_index, which this shortcut declines
  attach_sources(a, kUnread, range, p);
  p.threads = a.threads;
  return true;
}

}  // namespace detail
}  // namespace rotary

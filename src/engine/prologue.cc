// rotary::prologue: validates every argument into a ProloguePlan (q/k/positions through the apply checks), then runs a backend.
#include "rotary/prologue.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/messages.h"
#include "engine/build_plan.h"
#include "engine/fast_plan.h"
#include "engine/overlap.h"
#include "engine/position_checks.h"
#include "engine/prologue_build.h"
#include "engine/prologue_checks.h"
#include "engine/rope_access.h"
#include "engine/tensor_checks.h"
#include "plan/dtype_scalar.h"

namespace rotary {
namespace detail {
namespace {

constexpr const char* kWhere = kPrologueWhere;

[[noreturn]] void invalid(const std::string& msg) { detail::invalid(kWhere, msg); }

Sequences sequences(const PrologueArgs& a, const Plan& plan) {
  Sequences q;
  if (a.layout != Layout::kTHD) {
    q.count = plan.B;
  } else if (a.positions.kind == Positions::Kind::kPacked) {  // cu_seqlens validated by build_plan
    const TensorView& cu = a.positions.cu_seqlens;
    q.count = cu.shape[0] - 1;
    q.of_token.assign(static_cast<size_t>(plan.S), 0);
    q.first.resize(static_cast<size_t>(q.count));
    for (int64_t n = 0; n < q.count; ++n) {
      const int64_t b = load_int_index(cu.data, cu.dtype, n * cu.strides[0]);
      const int64_t e = load_int_index(cu.data, cu.dtype, (n + 1) * cu.strides[0]);
      q.first[static_cast<size_t>(n)] = b;
      for (int64_t t = b; t < e; ++t) q.of_token[static_cast<size_t>(t)] = n;
    }
  }
  return q;
}

int64_t seq_of(const Sequences& q, const Plan& plan, int64_t g) {
  if (!q.of_token.empty()) return q.of_token[static_cast<size_t>(g)];
  return q.count == 1 ? 0 : g / plan.S;
}

int64_t index_in_seq(const Sequences& q, const Plan& plan, int64_t g) {
  if (!q.of_token.empty()) return g - q.first[static_cast<size_t>(q.of_token[static_cast<size_t>(g)])];
  return g % plan.S;
}

/// The token grid of a validated plan as a slot-mapping shape: "[T] = [5]" or "[B,S] = [2,3]".
std::string grid_text(Layout layout, const Plan& plan) {
  if (layout == Layout::kTHD) return "[T] = [" + str(plan.S) + "]";
  return "[B,S] = [" + str(plan.B) + "," + str(plan.S) + "]";
}

}  // namespace

/// Cos/sin sources: one per frequency source, each over the positions of the tokens using it.
void attach_sources(const PrologueArgs& a, const Sequences& seqs, const PositionRange& range, ProloguePlan& p) {
  Plan& rp = p.rope;
  const int64_t tokens = rp.B * rp.S;
  const auto nsrc = static_cast<int64_t>(a.sources.size());
  std::vector<int64_t> seq_source;
  if (!absent(a.source_index)) {
    read_indices(a.source_index, "source_index", seqs.count, "[N] = [" + str(seqs.count) + "] (one entry per sequence)",
                 kWhere, &seq_source);
    for (int64_t n = 0; n < seqs.count; ++n)
      if (seq_source[static_cast<size_t>(n)] < 0 || seq_source[static_cast<size_t>(n)] >= nsrc)
        out_of_range(kWhere, "source_index[" + str(n) + "] must be in [0, " + str(nsrc) + ") (the number of sources), got " +
                                 str(seq_source[static_cast<size_t>(n)]));
  }
  if (nsrc > 255) invalid("sources must hold at most 255 frequency sources, got " + str(nsrc));
  // Per-source position ranges and token counts; one source (the common call) needs no allocation.
  PositionRange one_range;
  int64_t one_count = 0;
  std::vector<PositionRange> many_ranges;
  std::vector<int64_t> many_counts;
  if (nsrc > 1) {
    many_ranges.resize(static_cast<size_t>(nsrc));
    many_counts.assign(static_cast<size_t>(nsrc), 0);
  }
  PositionRange* ranges = nsrc > 1 ? many_ranges.data() : &one_range;
  int64_t* counts = nsrc > 1 ? many_counts.data() : &one_count;
  if (nsrc == 1 || seq_source.empty()) {
    ranges[0] = range;
    counts[0] = tokens;
  } else {
    p.token_source.resize(static_cast<size_t>(tokens));
    for (int64_t g = 0; g < tokens; ++g) {
      const auto src = seq_source[static_cast<size_t>(seq_of(seqs, rp, g))];
      p.token_source[static_cast<size_t>(g)] = static_cast<uint8_t>(src);
      PositionRange& r = ranges[src];
      ++counts[src];
      for (int axis = 0; axis < rp.pos.n_axes; ++axis) {
        if (rp.pos.fractional()) {
          const double v = load_index(rp.pos.ids, rp.pos.ids_dtype,
                                      axis * rp.pos.ids_sa + (g / rp.S) * rp.pos.ids_sb + (g % rp.S) * rp.pos.ids_ss);
          r.any = true;
          r.fractional = true;
          r.max_f = std::max(r.max_f, v);
          r.max_int = std::max(r.max_int, static_cast<int64_t>(v));
        } else {
          note_position(&r, token_position(rp.pos, g / rp.S, g % rp.S, axis));
        }
      }
    }
  }
  for (int64_t i = 0; i < nsrc; ++i)  // a table-mode rope's limit, named by its source, before anything is attached
    if (ranges[i].any && !ranges[i].fractional)
      RopeAccess::check_table_limit(*a.sources[static_cast<size_t>(i)].rope, a.sources[static_cast<size_t>(i)].seq_len,
                                    ranges[i].max_int, kWhere, "sources", i);
  if (nsrc == 1) {  // the common call: the source stays in the rotation plan (ProloguePlan::source_of)
    const FrequencySource& fs = a.sources[0];
    RopeAccess::attach(*fs.rope, ranges[0], fs.seq_len, std::max<int64_t>(1, counts[0]), rp, p.freq_storage);
    return;
  }
  p.sources.resize(static_cast<size_t>(nsrc));
  for (int64_t i = 0; i < nsrc; ++i) {
    const FrequencySource& fs = a.sources[static_cast<size_t>(i)];
    RopeAccess::attach(*fs.rope, ranges[i], fs.seq_len, std::max<int64_t>(1, counts[i]),
                       rp, p.freq_storage);
    p.sources[static_cast<size_t>(i)] = std::move(rp.cs);
    rp.cs = PlanCosSin{};
  }
}

namespace {

/// Cache rows, scales and the slot of every token.
void plan_cache(const PrologueArgs& a, const Sequences& seqs, ProloguePlan& p) {
  Plan& rp = p.rope;
  const int ci = static_cast<int>(a.cache_layout);
  if (ci < 0 || ci > 3) invalid("cache_layout must be nhd, hnd, bshd or bhsd, got " + str(ci));
  const int64_t hkv = p.hkv, D = rp.head_dim;
  int64_t major = 0, v_major = 0;
  cache_rows(a.k_cache, a.cache_layout, "k_cache", hkv, D, kWhere, &major, &p.k_cache);
  if (p.has_v) {
    cache_rows(a.v_cache, a.cache_layout, "v_cache", hkv, p.v_dim, kWhere, &v_major, &p.v_cache);
    if (a.v_cache.dtype != a.k_cache.dtype)
      invalid_dtype(kWhere, std::string("v_cache dtype must equal k_cache dtype ") + dtype_name(a.k_cache.dtype) + ", got " +
                                dtype_name(a.v_cache.dtype));
    if (v_major != major || p.v_cache.minor_count != p.k_cache.minor_count)
      invalid("v_cache must have k_cache's first three dims with its own D (" + str(p.v_dim) + "), got k_cache " +
              shape_str(a.k_cache) + " and v_cache " + shape_str(a.v_cache));
  }
  attach_scale(p.k_cache, a.k_scale, a.k_cache, a.cache_layout, "k_scale", "k_cache", kWhere);
  if (p.has_v) attach_scale(p.v_cache, a.v_scale, a.v_cache, a.cache_layout, "v_scale", "v_cache", kWhere);
  else if (!absent(a.v_scale)) invalid("v_scale is given but v_cache is absent, got v_scale shape " + shape_str(a.v_scale));

  const int64_t tokens = rp.B * rp.S;
  const int64_t minor = p.k_cache.minor_count;
  if (is_paged(a.cache_layout)) {
    if (!absent(a.cache_positions))
      invalid(std::string("cache_positions addresses contiguous caches (bshd, bhsd); cache_layout ") +
              cache_layout_name(a.cache_layout) + " takes slot_mapping, got cache_positions shape " + shape_str(a.cache_positions));
    if (absent(a.slot_mapping))
      invalid(std::string("slot_mapping must be given for a paged cache (cache_layout ") + cache_layout_name(a.cache_layout) +
              "), got none");
    const TensorView& sm = a.slot_mapping;
    if (sm.dtype == DType::kI64 && sm.rank == 1 && sm.shape[0] == tokens && (sm.strides[0] == 1 || tokens == 1) &&
        a.layout == Layout::kTHD && sm.data != nullptr) {
      p.slots = static_cast<const int64_t*>(sm.data);  // the caller's own array, read in place
    } else {
      read_indices(sm, "slot_mapping", tokens, grid_text(a.layout, rp), kWhere, &p.slot_storage,
                   a.layout == Layout::kTHD ? -1 : rp.B, rp.S);
      p.slots = p.slot_storage.data();
    }
    check_slots(p.slots, tokens, major * minor, "slot_mapping", "num_blocks * block_size", kWhere);
    return;
  }
  if (!absent(a.slot_mapping))
    invalid(std::string("slot_mapping addresses paged caches (nhd, hnd); cache_layout ") + cache_layout_name(a.cache_layout) +
            " takes cache_positions, got slot_mapping shape " + shape_str(a.slot_mapping));
  contiguous_slots(a, seqs, major, p);
}

}  // namespace

/// The slot of every token in a contiguous cache ([B, S_max, ...] of `major` rows of S_max): row n * S_max +
/// cache_positions[n] + (index in sequence n), after checking cache_positions and the cache's B and S_max.
void contiguous_slots(const PrologueArgs& a, const Sequences& seqs, int64_t major, ProloguePlan& p) {
  const Plan& rp = p.rope;
  const int64_t tokens = rp.B * rp.S, minor = p.k_cache.minor_count;
  std::vector<int64_t> start(static_cast<size_t>(seqs.count), 0);
  if (!absent(a.cache_positions))
    read_indices(a.cache_positions, "cache_positions", seqs.count,
                 "[N] = [" + str(seqs.count) + "] (the start row of each sequence)", kWhere, &start);
  if (seqs.count > major)
    invalid("k_cache must have a row per sequence: its first dim (B) must be >= " + str(seqs.count) + ", got " +
            shape_str(a.k_cache));
  std::vector<int64_t> len(static_cast<size_t>(seqs.count), 0);
  for (int64_t g = 0; g < tokens; ++g) ++len[static_cast<size_t>(seq_of(seqs, rp, g))];
  for (int64_t n = 0; n < seqs.count; ++n) {
    const int64_t s0 = start[static_cast<size_t>(n)], l = len[static_cast<size_t>(n)];
    if (s0 < 0 || s0 > minor - l)
      out_of_range(kWhere, "cache_positions[" + str(n) + "] must be in [0, S_max - length = " + str(minor) + " - " + str(l) +
                               "] (sequence " + str(n) + " has " + str(l) + " tokens), got " + str(s0));
  }
  p.slot_storage.resize(static_cast<size_t>(tokens));
  for (int64_t g = 0; g < tokens; ++g) {
    const int64_t n = seq_of(seqs, rp, g);
    p.slot_storage[static_cast<size_t>(g)] = n * minor + start[static_cast<size_t>(n)] + index_in_seq(seqs, rp, g);
  }
  p.slots = p.slot_storage.data();
}

namespace {

/// Every tensor the call writes shares no memory with what it reads or with another output (the apply
/// checks already covered q, k and their outputs among themselves).
void check_outputs(const PrologueArgs& a, const ProloguePlan& p) {
  struct Named {
    const TensorView* v = nullptr;
    const char* name = nullptr;
    bool activation = false;  // of a.layout: exact element test against other activations
    // Byte range: check_disjoint (exact) runs only for pairs whose ranges meet (a decode step's tensors
    // never do, and it has eleven of them). none: absent or without elements (nothing to compare).
    bool none = true;
    uintptr_t lo = 0, hi = 0;
  };
  // Fixed arrays, not vectors: this runs on every call, a decode step's included (no allocation).
  constexpr size_t kMaxWrites = 6, kMaxReads = 12;
  Named writes[kMaxWrites], reads[kMaxReads];
  size_t nw = 0, nr = 0;
  auto add = [](Named* list, size_t* n, const TensorView* v, const char* name, bool activation) {
    Named& x = list[(*n)++];
    x.v = v;
    x.name = name;
    x.activation = activation;
    x.none = absent(*v) || !has_elements(*v);
    if (!x.none) byte_range(*v, &x.lo, &x.hi);
  };
  const bool has_cache = p.k_cache.present();
  if (!absent(a.q)) add(writes, &nw, absent(a.q_out) ? &a.q : &a.q_out, absent(a.q_out) ? "q (rotated in place)" : "q_out", true);
  if (!has_cache) add(writes, &nw, absent(a.k_out) ? &a.k : &a.k_out, absent(a.k_out) ? "k (written in place)" : "k_out", true);
  const size_t apply_writes = nw;
  if (has_cache) add(writes, &nw, &a.k_cache, "k_cache", false);
  if (p.has_v) add(writes, &nw, &a.v_cache, "v_cache", false);
  if (has_cache && p.k_cache.dtype == DType::kI8) add(writes, &nw, &a.k_scale, "k_scale", false);
  if (p.has_v && p.v_cache.dtype == DType::kI8) add(writes, &nw, &a.v_scale, "v_scale", false);
  add(reads, &nr, &a.q, "q", true);
  add(reads, &nr, &a.k, "k", true);
  const size_t apply_reads = nr;
  add(reads, &nr, &a.v, "v", true);
  add(reads, &nr, &a.q_norm_weight, "q_norm_weight", false);
  add(reads, &nr, &a.k_norm_weight, "k_norm_weight", false);
  add(reads, &nr, &a.slot_mapping, "slot_mapping", false);
  add(reads, &nr, &a.cache_positions, "cache_positions", false);
  add(reads, &nr, &a.source_index, "source_index", false);
  // The kernels read positions per token through the caller's pointers, after earlier tokens' cache writes
  // (the tensors of the positions' kind, as the apply checks).
  NamedInput pos[2];
  for (int i = 0, n = position_inputs(a.positions, pos); i < n; ++i) add(reads, &nr, pos[i].view, pos[i].name, false);
  if (has_cache && is_fp8(p.k_cache.dtype)) add(reads, &nr, &a.k_scale, "k_scale", false);
  if (p.has_v && is_fp8(p.v_cache.dtype)) add(reads, &nr, &a.v_scale, "v_scale", false);
  auto meet = [](const Named& x, const Named& y) {
    if (x.none || y.none) return false;
    const bool ordered = x.lo < x.hi && y.lo < y.hi;  // else let check_disjoint decide
    return !ordered || (x.lo < y.hi && y.lo < x.hi);
  };
  for (size_t i = 0; i < nw; ++i) {
    const Named& w = writes[i];
    for (size_t j = 0; j < nr; ++j) {
      const Named& r = reads[j];
      if (i < apply_writes && j < apply_reads) continue;  // build_plan's aliasing rules
      if (!meet(w, r)) continue;
      const bool exact = w.activation && r.activation;
      check_disjoint(*w.v, w.name, *r.v, r.name, kWhere, exact ? &a.layout : nullptr);
    }
    for (size_t j = std::max(i + 1, apply_writes); j < nw; ++j)
      if (meet(w, writes[j])) check_disjoint(*w.v, w.name, *writes[j].v, writes[j].name, kWhere);
  }
}

}  // namespace

/// The apply request of a call's rotation: q and k through the apply planner (k alone, as its "q", when q is
/// absent), k's output only without a cache (with one, k is read and its rows go to the cache).
void rotation_request(const PrologueArgs& a, const SourceGeometry& geo, bool rotate, ApplyArgs* ap, PlanRequest* req) {
  const bool has_q = !absent(a.q), has_cache = !absent(a.k_cache);
  ap->q = has_q ? a.q : a.k;
  ap->q_out = has_q ? a.q_out : (has_cache ? TensorView{} : a.k_out);
  if (has_q) {
    ap->k = a.k;
    ap->k_out = has_cache ? TensorView{} : a.k_out;
  }
  ap->positions = a.positions;
  ap->layout = a.layout;
  ap->pairing = geo.pairing;
  req->k_read_only = has_q && has_cache;  // k's rotated rows go to the cache
  req->read_only = !has_q && has_cache;
  ap->threads = a.threads;
  ap->backend = a.backend;
  req->rotary_dim = rotate ? geo.rotary_dim : 0;
  req->head_dim = rotate ? geo.head_dim : 0;
  req->no_rotation = !rotate;  // any head_dim, D = 1 included
  req->default_pairing = geo.pairing;
  req->allow_fractional = true;
  if (geo.n_axes > 1) {
    req->n_axes = geo.n_axes;
    req->axes_what = "t, h, w position per token for an M-RoPE spec";
    req->axes_accept_single = true;  // [T] / [B,S] / [S]: text-only, the same position on every axis, as apply takes
  }
}

ProloguePlan build_prologue_plan(const PrologueArgs& a) {
  ProloguePlan p;
  if (!build_prologue_plan_fast(a, &p)) p = build_prologue_plan_full(a);
  return p;
}

ProloguePlan build_prologue_plan_full(const PrologueArgs& a) {
  ProloguePlan p;
  const int bi = static_cast<int>(a.backend);
  if (bi < 0 || bi > 3) invalid("backend must be auto, cpu, reference or cuda, got " + str(bi));
  if (a.backend == Backend::kCuda)
    fail(Error::Kind::kUnsupported, kWhere, "backend cuda: the prologue runs on the CPU backends (auto, cpu, reference), got cuda");
  if (absent(a.k)) invalid("k must be given (the prologue writes k, and v, into the cache), got none");
  const bool has_cache = !absent(a.k_cache);
  if (!has_cache && !absent(a.v_cache)) invalid("v_cache is given but k_cache is absent, got v_cache shape " + shape_str(a.v_cache));
  if (!has_cache && !absent(a.v)) invalid("v is given but there is no cache to write it to (k_cache and v_cache absent)");
  if (has_cache && absent(a.v) != absent(a.v_cache))
    invalid(absent(a.v) ? "v_cache is given but v is absent" : "v is given but v_cache is absent");
  if (has_cache && !absent(a.k_out))
    invalid("k_out is given but k goes to k_cache (k_out is for calls without a cache), got k_out shape " + shape_str(a.k_out));
  if (absent(a.q) && !absent(a.q_out)) invalid("q_out is given but q is absent, got q_out shape " + shape_str(a.q_out));
  if (absent(a.q) && !absent(a.q_norm_weight)) invalid("q_norm_weight is given but q is absent");
  if (!std::isfinite(a.norm_eps) || a.norm_eps < 0) invalid("norm_eps must be finite and >= 0, got " + num(a.norm_eps));
  if (!std::isfinite(a.norm_offset)) invalid("norm_offset must be finite, got " + num(a.norm_offset));

  p.rotate = !a.sources.empty();
  const SourceGeometry geo = check_sources(a.sources, "sources", kWhere);
  if (!p.rotate && !absent(a.source_index)) invalid("source_index is given but sources is empty");
  // Several sources without an index would give every sequence sources[0], silently: the index is required.
  if (a.sources.size() > 1 && absent(a.source_index))
    invalid("source_index must be given when sources has " + str(static_cast<int64_t>(a.sources.size())) +
            " entries (the source of each sequence), got none");
  // q and k (k alone when q is absent) through the apply checks: shapes, dtypes, strides, aliasing, positions.
  const bool has_q = !absent(a.q);
  ApplyArgs ap;
  PlanRequest req;
  rotation_request(a, geo, p.rotate, &ap, &req);
  PositionRange range;
  try {
    p.rope = build_plan(ap, req, &range);
  } catch (const Error& e) {
    rethrow_as(e, kWhere, !has_q);  // without q, the apply checks saw k as their "q"
  }
  Plan& rp = p.rope;
  if (ap.q.dtype == DType::kF64 && has_cache) invalid_dtype(kWhere, "q, k and v must be f32, f16 or bf16 with a cache, got f64");
  // build_plan leaves tensors without heads out of the apply plan: q is t[0] and k follows it when present.
  const int64_t hq = has_q ? canonical(a.q, a.layout).H : 0;
  p.hkv = canonical(a.k, a.layout).H;
  p.q_index = hq > 0 ? 0 : -1;
  p.k_index = p.hkv > 0 ? (hq > 0 ? 1 : 0) : -1;
  if (!p.rotate) {
    rp.rotary_dim = 0;
    rp.half = 0;
  }
  // v
  p.has_v = !absent(a.v);
  if (p.has_v) {
    Canon cv;
    try {
      check_activation(a.v, "v", a.layout);
    } catch (const Error& e) {
      rethrow_as(e, kWhere);
    }
    cv = canonical(a.v, a.layout);
    if (a.v.dtype != ap.q.dtype)
      invalid_dtype(kWhere, std::string("v dtype must equal ") + (has_q ? "q" : "k") + " dtype " + dtype_name(ap.q.dtype) +
                                ", got " + dtype_name(a.v.dtype));
    const int64_t hk = p.hkv;
    if (cv.B != rp.B || cv.S != rp.S || cv.H != hk)
      invalid("v must have k's batch, tokens and heads (" + str(rp.B) + ", " + str(rp.S) + ", " + str(hk) + ") in layout " +
              layout_name(a.layout) + ", got shape " + shape_str(a.v));
    p.v.in = a.v.data;
    p.v.out = nullptr;
    p.v.heads = cv.H;
    p.v.in_sb = cv.sb; p.v.in_ss = cv.ss; p.v.in_sh = cv.sh; p.v.in_sd = cv.sd;
    p.v_dim = cv.D;
  }
  // norm
  if (!absent(a.q_norm_weight))
    p.q_norm = norm_weight(a.q_norm_weight, "q_norm_weight", rp.head_dim, a.norm_offset, kWhere, &p.q_norm_storage);
  if (!absent(a.k_norm_weight))
    p.k_norm = norm_weight(a.k_norm_weight, "k_norm_weight", rp.head_dim, a.norm_offset, kWhere, &p.k_norm_storage);
  p.eps = static_cast<float>(a.norm_eps);

  const Sequences seqs = sequences(a, rp);
  if (has_cache) plan_cache(a, seqs, p);
  else if (!absent(a.slot_mapping) || !absent(a.cache_positions) || !absent(a.k_scale) || !absent(a.v_scale))
    invalid("slot_mapping, cache_positions, k_scale and v_scale address a cache, but k_cache is absent");
  check_outputs(a, p);
  if (p.rotate && rp.B * rp.S > 0) attach_sources(a, seqs, range, p);
  p.threads = a.threads;
  return p;
}

}  // namespace detail

void prologue(const PrologueArgs& args) {
  const detail::ProloguePlan plan = detail::build_prologue_plan(args);
  if (plan.rope.B == 0 || plan.rope.S == 0) return;
  if (args.backend == Backend::kReference) return detail::reference_prologue(plan);
  detail::cpu_prologue(plan);
}

}  // namespace rotary

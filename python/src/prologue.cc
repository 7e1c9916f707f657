// Binds the prologue family (rotary::prologue, rerotate_cache) and fp8-output apply for rotary/_prologue.py; the GIL is released in kernels.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "rotary/prologue.h"

namespace rotary_py {

namespace {

template <class A>
rotary::TensorView opt_view(const std::optional<A>& a, const char* where, const char* what, int bits_as = -1) {
  return a ? to_view_as(*a, where, what, bits_as) : rotary::TensorView{};
}

/// Frequency sources from Specs (each's shared Rope) and per-source lengths.
std::vector<rotary::FrequencySource> sources_of(const nb::list& specs, const std::vector<std::optional<int64_t>>& seq_lens) {
  std::vector<rotary::FrequencySource> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    const PySpec& s = nb::cast<const PySpec&>(specs[i]);
    rotary::FrequencySource f;
    f.rope = &s.rope();
    if (i < seq_lens.size()) f.seq_len = seq_lens[i];
    out.push_back(f);
  }
  return out;
}

}  // namespace

void bind_prologue(nb::module_& m) {
  m.def(
      "_prologue",
      [](std::optional<InArray> q, InArray k, std::optional<InArray> v, std::optional<OutArray> q_out,
         std::optional<OutArray> k_out, int64_t offset, std::optional<InArray> ids, std::optional<InArray> cu_seqlens,
         std::optional<InArray> seq_offsets, std::optional<InArray> batch_offsets, nb::list specs,
         std::vector<std::optional<int64_t>> seq_lens, std::optional<InArray> source_index, const std::string& cache_layout,
         std::optional<OutArray> k_cache, std::optional<OutArray> v_cache, std::optional<InArray> slot_mapping,
         std::optional<InArray> cache_positions, std::optional<OutArray> k_scale, std::optional<OutArray> v_scale,
         std::optional<InArray> q_norm_weight, std::optional<InArray> k_norm_weight, double norm_eps, double norm_offset,
         const std::string& layout, int threads, const std::string& backend, int act_bits, int cache_bits, int weight_bits) {
        rotary::PrologueArgs a;
        constexpr const char* where = "rotary_prologue";
        a.q = opt_view(q, where, "q", act_bits);
        a.k = to_view_as(k, where, "k", act_bits);
        a.v = opt_view(v, where, "v", act_bits);
        a.q_out = opt_view(q_out, where, "q_out", act_bits);
        a.k_out = opt_view(k_out, where, "k_out", act_bits);
        std::vector<int64_t> starts;
        a.positions = positions_of(offset, ids, cu_seqlens, seq_offsets, batch_offsets, where, &starts);
        a.layout = parse_layout(where, layout);
        a.sources = sources_of(specs, seq_lens);
        a.source_index = opt_view(source_index, where, "spec_index");
        a.cache_layout = parse_cache_layout(where, cache_layout);
        a.k_cache = opt_view(k_cache, where, "k_cache", cache_bits);
        a.v_cache = opt_view(v_cache, where, "v_cache", cache_bits);
        a.slot_mapping = opt_view(slot_mapping, where, "slot_mapping");
        a.cache_positions = opt_view(cache_positions, where, "cache_positions");
        a.k_scale = opt_view(k_scale, where, "k_scale");
        a.v_scale = opt_view(v_scale, where, "v_scale");
        a.q_norm_weight = opt_view(q_norm_weight, where, "q_norm_weight", weight_bits);
        a.k_norm_weight = opt_view(k_norm_weight, where, "k_norm_weight", weight_bits);
        a.norm_eps = norm_eps;
        a.norm_offset = norm_offset;
        a.threads = threads;
        a.backend = parse_backend(where, backend);
        nb::gil_scoped_release release;
        rotary::prologue(a);
      },
      nb::arg("q").none(), nb::arg("k"), nb::arg("v").none(), nb::kw_only(), nb::arg("q_out").none() = nb::none(),
      nb::arg("k_out").none() = nb::none(), nb::arg("offset") = 0, nb::arg("ids").none() = nb::none(),
      nb::arg("cu_seqlens").none() = nb::none(), nb::arg("seq_offsets").none() = nb::none(),
      nb::arg("batch_offsets").none() = nb::none(), nb::arg("specs"), nb::arg("seq_lens"),
      nb::arg("source_index").none() = nb::none(), nb::arg("cache_layout") = "nhd", nb::arg("k_cache").none() = nb::none(),
      nb::arg("v_cache").none() = nb::none(), nb::arg("slot_mapping").none() = nb::none(),
      nb::arg("cache_positions").none() = nb::none(), nb::arg("k_scale").none() = nb::none(),
      nb::arg("v_scale").none() = nb::none(), nb::arg("q_norm_weight").none() = nb::none(),
      nb::arg("k_norm_weight").none() = nb::none(), nb::arg("norm_eps") = 1e-6, nb::arg("norm_offset") = 0.0,
      nb::arg("layout") = "thd", nb::arg("threads") = 0, nb::arg("backend") = "auto", nb::arg("act_bits") = -1,
      nb::arg("cache_bits") = -1, nb::arg("weight_bits") = -1,
      "Private: rotary.prologue after argument normalisation (rotary::prologue).");

  m.def(
      "_rerotate_cache",
      [](OutArray k_cache, InArray slots, InArray from_positions, InArray to_positions, const PySpec& spec,
         nb::object to_spec, std::optional<int64_t> from_seq_len,
         std::optional<int64_t> to_seq_len, const std::string& cache_layout, std::optional<OutArray> k_scale, int threads,
         const std::string& backend, int cache_bits) {
        rotary::RerotateArgs r;
        constexpr const char* where = "rotary_rerotate_cache";
        r.k_cache = to_view_as(k_cache, where, "k_cache", cache_bits);
        r.cache_layout = parse_cache_layout(where, cache_layout);
        r.k_scale = opt_view(k_scale, where, "k_scale");
        r.slots = to_view(slots, where, "slots");
        r.from_positions = to_view(from_positions, where, "from_positions");
        r.to_positions = to_view(to_positions, where, "to_positions");
        r.from = {&spec.rope(), from_seq_len};
        r.to = {to_spec.is_none() ? nullptr : &nb::cast<const PySpec&>(to_spec).rope(), to_seq_len};
        r.threads = threads;
        r.backend = parse_backend(where, backend);
        nb::gil_scoped_release release;
        rotary::rerotate_cache(r);
      },
      nb::arg("k_cache"), nb::arg("slots"), nb::arg("from_positions"), nb::arg("to_positions"), nb::arg("spec"),
      nb::kw_only(), nb::arg("to_spec").none() = nb::none(), nb::arg("from_seq_len").none() = nb::none(),
      nb::arg("to_seq_len").none() = nb::none(), nb::arg("cache_layout") = "nhd", nb::arg("k_scale").none() = nb::none(),
      nb::arg("threads") = 0, nb::arg("backend") = "auto", nb::arg("cache_bits") = -1,
      "Private: rotary.rerotate_cache after argument normalisation (rotary::rerotate_cache).");

  m.def(
      "_apply_fp8",
      [](nb::object spec, InArray q, std::optional<OutArray> q_out, std::optional<InArray> k,
         std::optional<OutArray> k_out, int64_t offset, std::optional<InArray> ids, std::optional<InArray> cu_seqlens,
         std::optional<InArray> seq_offsets, std::optional<InArray> batch_offsets, const std::string& layout,
         std::optional<std::string> pairing, bool inverse, std::optional<int64_t> seq_len, int threads,
         const std::string& backend, int act_bits, int q_out_bits, int k_out_bits, double q_out_scale,
         double k_out_scale, std::optional<InArray> cos, std::optional<InArray> sin, bool table_bf16_bits) {
        rotary::ApplyArgs a;
        constexpr const char* where = "rotary_apply";
        a.q = to_view_as(q, where, k ? "q" : "x", act_bits);  // rotary.apply's x and out, apply_qk's q and q_out
        a.q_out = opt_view(q_out, where, k ? "q_out" : "out", q_out_bits);
        a.k = opt_view(k, where, "k", act_bits);
        a.k_out = opt_view(k_out, where, "k_out", k_out_bits);
        std::vector<int64_t> starts;
        a.positions = positions_of(offset, ids, cu_seqlens, seq_offsets, batch_offsets, where, &starts);
        a.layout = parse_layout(where, layout);
        if (pairing) a.pairing = parse_pairing(where, *pairing);
        a.direction = inverse ? rotary::Direction::kInverse : rotary::Direction::kForward;
        a.seq_len = seq_len;
        a.threads = threads;
        a.backend = parse_backend(where, backend);
        a.q_out_scale = static_cast<float>(q_out_scale);
        a.k_out_scale = static_cast<float>(k_out_scale);
        if (spec.is_none()) {  // the caller's cos/sin tables (rotary.apply_cos_sin / apply_qk_cos_sin)
          const rotary::TensorView cv = to_view(*cos, where, "cos", table_bf16_bits);
          const rotary::TensorView sv = to_view(*sin, where, "sin", table_bf16_bits);
          nb::gil_scoped_release release;
          rotary::apply_cos_sin(cv, sv, a);
          return;
        }
        rotary::Rope& rope = nb::cast<const PySpec&>(spec).rope();
        nb::gil_scoped_release release;
        rope.apply(a);
      },
      nb::arg("spec").none(), nb::arg("q"), nb::kw_only(), nb::arg("q_out").none() = nb::none(), nb::arg("k").none() = nb::none(),
      nb::arg("k_out").none() = nb::none(), nb::arg("offset") = 0, nb::arg("ids").none() = nb::none(),
      nb::arg("cu_seqlens").none() = nb::none(), nb::arg("seq_offsets").none() = nb::none(),
      nb::arg("batch_offsets").none() = nb::none(), nb::arg("layout") = "bshd", nb::arg("pairing").none() = nb::none(),
      nb::arg("inverse") = false, nb::arg("seq_len").none() = nb::none(), nb::arg("threads") = 0,
      nb::arg("backend") = "auto", nb::arg("act_bits") = -1, nb::arg("q_out_bits") = -1, nb::arg("k_out_bits") = -1,
      nb::arg("q_out_scale") = 1.0, nb::arg("k_out_scale") = 1.0, nb::arg("cos").none() = nb::none(),
      nb::arg("sin").none() = nb::none(), nb::arg("table_bf16_bits") = false,
      "Private: rotary.apply / apply_qk (spec) and apply_cos_sin / apply_qk_cos_sin (spec None, cos and sin) with fp8 "
      "outputs (ApplyArgs::q_out_scale / k_out_scale).");
}

}  // namespace rotary_py

// Binds multi-axis frequencies (M-RoPE, 2-D vision, ggml params), apply_axes, context-parallel positions, q/k permutation.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "rotary/context_parallel.h"

namespace rotary_py {

namespace {

using F64Array = nb::ndarray<nb::numpy, double, nb::ndim<1>>;
using U8Array = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>;
using I64Array = nb::ndarray<nb::numpy, int64_t, nb::ndim<1>>;

template <class T, class Out>
Out to_numpy(const std::vector<T>& v) {
  T* data = new T[std::max<std::size_t>(1, v.size())];
  if (!v.empty()) std::memcpy(data, v.data(), v.size() * sizeof(T));
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return Out(data, {v.size()}, owner);
}

/// (inv_freq, axis_of_freq, n_axes, pairing, attention_factor, signed_positions): the Python view of
/// rotary::AxisFrequencies.
using AxisTuple = std::tuple<F64Array, U8Array, int, std::string, double, bool>;

AxisTuple to_tuple(const rotary::AxisFrequencies& af) {
  return {to_numpy<double, F64Array>(af.freqs.inv_freq), to_numpy<uint8_t, U8Array>(af.axis_of_freq), af.n_axes,
          rotary::pairing_name(af.pairing), af.freqs.attention_factor, af.signed_positions};
}

rotary::AxisFrequencies from_parts(const std::vector<double>& inv_freq, const std::vector<int>& axis, int n_axes,
                                   const std::string& pairing, double attention_factor, bool signed_positions) {
  rotary::AxisFrequencies af;
  af.signed_positions = signed_positions;
  af.freqs.inv_freq = inv_freq;
  af.freqs.attention_factor = attention_factor;
  af.n_axes = n_axes;
  af.pairing = parse_pairing("rotary_apply_axes", pairing);
  af.axis_of_freq.reserve(axis.size());
  for (std::size_t j = 0; j < axis.size(); ++j) {
    if (axis[j] < 0 || axis[j] > 255)
      throw nb::value_error(("[rotary_axis_frequencies] axis_of_freq[" + std::to_string(j) + "] must be in [0, n_axes), got " +
                             std::to_string(axis[j])).c_str());
    af.axis_of_freq.push_back(static_cast<uint8_t>(axis[j]));
  }
  return af;
}

}  // namespace

void bind_multimodal(nb::module_& m) {
  m.def(
      "_mrope_frequencies",
      [](const PySpec& spec, std::optional<int64_t> seq_len) { return to_tuple(rotary::mrope_frequencies(spec.spec(), seq_len)); },
      nb::arg("spec"), nb::arg("seq_len").none() = nb::none(),
      "Private: (inv_freq, axis_of_freq, n_axes, pairing, attention_factor) of a spec with its M-RoPE axis map.");

  m.def(
      "_vision_frequencies",
      [](const std::string& convention, int64_t head_dim, double base, std::optional<std::string> pairing) {
        rotary::VisionSpec vs;
        vs.convention = rotary::parse_vision_convention(convention, "convention");
        vs.head_dim = head_dim;
        vs.base = base;
        if (pairing) vs.pairing = parse_pairing("rotary_vision", *pairing);
        return to_tuple(rotary::vision_frequencies(vs));
      },
      nb::arg("convention"), nb::arg("head_dim"), nb::arg("base"), nb::arg("pairing").none(),
      "Private: rotary::vision_frequencies.");

  m.def(
      "_ggml_frequencies",
      [](const std::string& mode, int64_t n_dims, int64_t n_ctx_orig, double freq_base, double freq_scale,
         double ext_factor, double attn_factor, double beta_fast, double beta_slow, std::vector<int64_t> sections,
         std::vector<double> freq_factors) {
        rotary::GgmlRopeParams p;
        p.mode = rotary::parse_ggml_rope_mode(mode);
        p.n_dims = n_dims;
        p.n_ctx_orig = n_ctx_orig;
        p.freq_base = freq_base;
        p.freq_scale = freq_scale;
        p.ext_factor = ext_factor;
        p.attn_factor = attn_factor;
        p.beta_fast = beta_fast;
        p.beta_slow = beta_slow;
        if (sections.size() > 4)
          throw nb::value_error(("[rotary_ggml] sections must have at most 4 entries, got " + std::to_string(sections.size())).c_str());
        for (std::size_t i = 0; i < sections.size(); ++i) p.sections[i] = sections[i];
        p.freq_factors = std::move(freq_factors);
        return to_tuple(rotary::ggml_frequencies(p));
      },
      nb::arg("mode"), nb::arg("n_dims"), nb::kw_only(), nb::arg("n_ctx_orig"), nb::arg("freq_base"),
      nb::arg("freq_scale"), nb::arg("ext_factor"), nb::arg("attn_factor"), nb::arg("beta_fast"), nb::arg("beta_slow"),
      nb::arg("sections"), nb::arg("freq_factors"), "Private: rotary::ggml_frequencies.");

  m.def(
      "_apply_axes",
      [](std::vector<double> inv_freq, std::vector<int> axis, int n_axes, const std::string& default_pairing,
         double attention_factor, bool signed_positions, InArray q, std::optional<OutArray> q_out,
         std::optional<InArray> k, std::optional<OutArray> k_out, InArray ids, const std::string& layout,
         std::optional<std::string> pairing, bool inverse, int threads, const std::string& backend, bool bf16_bits) {
        const rotary::AxisFrequencies af =
            from_parts(inv_freq, axis, n_axes, default_pairing, attention_factor, signed_positions);
        rotary::ApplyArgs a;
        constexpr const char* where = "rotary_apply_axes";
        a.q = to_view(q, where, "x", bf16_bits);
        if (q_out) a.q_out = to_view(*q_out, where, "out", bf16_bits);
        if (k) a.k = to_view(*k, where, "k", bf16_bits);
        if (k_out) a.k_out = to_view(*k_out, where, "k_out", bf16_bits);
        a.positions = rotary::Positions::from_ids(to_view(ids, where, "positions"));
        a.layout = parse_layout(where, layout);
        if (pairing) a.pairing = parse_pairing(where, *pairing);
        a.direction = inverse ? rotary::Direction::kInverse : rotary::Direction::kForward;
        a.threads = threads;
        a.backend = parse_backend(where, backend);
        nb::gil_scoped_release release;
        rotary::apply_axes(af, a);
      },
      nb::kw_only(), nb::arg("inv_freq"), nb::arg("axis_of_freq"), nb::arg("n_axes"), nb::arg("default_pairing"),
      nb::arg("attention_factor"), nb::arg("signed_positions") = false, nb::arg("q"),
      nb::arg("q_out").none() = nb::none(), nb::arg("k").none() = nb::none(),
      nb::arg("k_out").none() = nb::none(), nb::arg("ids"), nb::arg("layout") = "bshd",
      nb::arg("pairing").none() = nb::none(), nb::arg("inverse") = false, nb::arg("threads") = 0,
      nb::arg("backend") = "auto", nb::arg("bf16_bits") = false,
      "Private: rotary::apply_axes (on-the-fly multi-axis rotation).");

  m.def(
      "grid_positions",
      [](int64_t height, int64_t width) {
        const std::vector<int64_t> ids = rotary::grid_positions(height, width);
        int64_t* data = new int64_t[std::max<std::size_t>(1, ids.size())];
        if (!ids.empty()) std::memcpy(data, ids.data(), ids.size() * sizeof(int64_t));
        nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<int64_t*>(p); });
        return nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>(data, {2, static_cast<std::size_t>(height * width)}, owner);
      },
      nb::arg("height"), nb::arg("width"),
      "(row, col) ids [2, height*width] of a patch grid in row-major order: the [2, T] positions of one image.");

  m.def(
      "cp_positions",
      [](int64_t rank, int64_t cp_size, int64_t local_len, int64_t offset) {
        return to_numpy<int64_t, I64Array>(rotary::cp_positions({rank, cp_size}, local_len, offset));
      },
      nb::arg("rank"), nb::arg("cp_size"), nb::arg("local_len"), nb::arg("offset") = 0,
      "Global positions [local_len] of a context-parallel shard (TransformerEngine dual-chunk: rank r holds chunks "
      "r and 2*cp_size-1-r of the sequence), plus offset.");
  m.def(
      "cp_positions_packed",
      [](int64_t rank, int64_t cp_size, std::vector<int64_t> cu) {
        return to_numpy<int64_t, I64Array>(rotary::cp_positions_packed({rank, cp_size}, cu));
      },
      nb::arg("rank"), nb::arg("cp_size"), nb::arg("cu_seqlens"),
      "Positions of a packed (thd) shard from the GLOBAL cu_seqlens (each length divisible by 2*cp_size).");
  m.def(
      "cp_local_cu_seqlens",
      [](int64_t rank, int64_t cp_size, std::vector<int64_t> cu) {
        return to_numpy<int64_t, I64Array>(rotary::cp_local_cu_seqlens({rank, cp_size}, cu));
      },
      nb::arg("rank"), nb::arg("cp_size"), nb::arg("cu_seqlens"), "The shard's cu_seqlens: global cu_seqlens / cp_size.");

  m.def(
      "_cp_shard",
      [](int64_t rank, int64_t cp_size, int64_t local_len, int64_t offset) {
        rotary::CpShard sh = rotary::cp_shard({rank, cp_size}, local_len, offset);
        return std::make_tuple(to_numpy<int64_t, I64Array>(sh.positions), sh.seq_len);
      },
      nb::arg("rank"), nb::arg("cp_size"), nb::arg("local_len"), nb::arg("offset") = 0,
      "Private: rotary::cp_shard: (global positions, seq_len) of a bshd/bhsd context-parallel shard.");
  m.def(
      "_cp_shard_packed",
      [](int64_t rank, int64_t cp_size, std::vector<int64_t> cu) {
        rotary::CpShard sh = rotary::cp_shard_packed({rank, cp_size}, cu);
        return std::make_tuple(to_numpy<int64_t, I64Array>(sh.positions), sh.seq_len);
      },
      nb::arg("rank"), nb::arg("cp_size"), nb::arg("cu_seqlens"),
      "Private: rotary::cp_shard_packed: (global positions, seq_len) of a thd shard from the GLOBAL cu_seqlens.");

  m.def(
      "_permute_qk",
      [](InArray w, OutArray out, int64_t n_heads, int64_t head_dim, int64_t rotary_dim, const std::string& src,
         const std::string& dst, bool bf16_bits) {
        rotary::QkPermutation p;
        p.n_heads = n_heads;
        p.head_dim = head_dim;
        p.rotary_dim = rotary_dim;
        p.from = parse_pairing("rotary_permute_qk", src, "src");
        p.to = parse_pairing("rotary_permute_qk", dst, "dst");
        const rotary::TensorView wv = to_view(w, "rotary_permute_qk", "w", bf16_bits);  // w's errors first
        rotary::permute_qk_weight(wv, to_view(out, "rotary_permute_qk", "out", bf16_bits), p);
      },
      nb::arg("w"), nb::arg("out"), nb::kw_only(), nb::arg("n_heads"), nb::arg("head_dim"), nb::arg("rotary_dim"),
      nb::arg("src"), nb::arg("dst"), nb::arg("bf16_bits") = false, "Private: rotary::permute_qk_weight.");
}

}  // namespace rotary_py

// Binds the apply entry points (spec tables, caller cos/sin) and cos/sin row queries; the GIL is released in kernels.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"

namespace rotary_py {

namespace {

/// The arrays and options shared by every apply entry point (private API used by rotary/__init__.py).
struct CallArrays {
  rotary::ApplyArgs args;
};

CallArrays build_args(const InArray& q, std::optional<OutArray>& q_out, std::optional<InArray>& k,
                      std::optional<OutArray>& k_out, const std::string& layout, std::optional<std::string> pairing,
                      bool inverse, std::optional<int64_t> seq_len, int threads, const std::string& backend,
                      bool bf16_bits) {
  CallArrays c;
  rotary::ApplyArgs& a = c.args;
  constexpr const char* where = "rotary_apply";
  // Named as the Python parameters: rotary.apply(x, out=...) alone, rotary.apply_qk(q, k, q_out=..., k_out=...).
  a.q = to_view(q, where, k ? "q" : "x", bf16_bits);
  if (q_out) a.q_out = to_view(*q_out, where, k ? "q_out" : "out", bf16_bits);
  if (k) a.k = to_view(*k, where, "k", bf16_bits);
  if (k_out) a.k_out = to_view(*k_out, where, "k_out", bf16_bits);
  a.layout = parse_layout(where, layout);
  if (pairing) a.pairing = parse_pairing(where, *pairing);
  a.direction = inverse ? rotary::Direction::kInverse : rotary::Direction::kForward;
  a.seq_len = seq_len;
  a.threads = threads;
  a.backend = parse_backend(where, backend);
  return c;
}

}  // namespace

rotary::Layout parse_layout(const char* where, std::string_view name, const char* what) {
  return rotary::parse_layout(name, what, where);
}

rotary::Pairing parse_pairing(const char* where, std::string_view name, const char* what) {
  return rotary::parse_pairing(name, what, where);
}

rotary::Backend parse_backend(const char* where, std::string_view name, const char* what) {
  return rotary::parse_backend(name, what, where);
}

rotary::CacheLayout parse_cache_layout(const char* where, std::string_view name, const char* what) {
  return rotary::parse_cache_layout(name, what, where);
}

rotary::Positions positions_of(int64_t offset, const std::optional<InArray>& ids, const std::optional<InArray>& cu_seqlens,
                               const std::optional<InArray>& seq_offsets, const std::optional<InArray>& batch_offsets,
                               const char* where, std::vector<int64_t>* storage) {
  auto refuse = [where](const std::string& msg) { rotary::fail(rotary::Error::Kind::kInvalidArgument, where, msg); };
  if (cu_seqlens) {
    if (ids)
      refuse("positions ids cannot be combined with cu_seqlens (packed positions are t - cu_seqlens[n] + "
             "seq_offsets[n]): give one scheme, got both");
    if (batch_offsets)
      refuse("batch_offsets cannot be combined with cu_seqlens (packed sequences start at seq_offsets), got both");
    if (offset < 0) refuse("positions.offset must be >= 0, got " + std::to_string(offset));
    if (offset != 0 && seq_offsets)
      refuse("give the packed sequences' starts either as an int positions or as seq_offsets, not both, got positions " +
             std::to_string(offset) + " and seq_offsets");
    const rotary::TensorView cu = to_view(*cu_seqlens, where, "cu_seqlens");
    rotary::TensorView so = seq_offsets ? to_view(*seq_offsets, where, "seq_offsets") : rotary::TensorView{};
    if (offset != 0 && cu.rank == 1 && cu.shape[0] >= 1) {  // other shapes: the core names cu_seqlens
      storage->assign(static_cast<size_t>(cu.shape[0] - 1), offset);
      so = rotary::TensorView::contiguous(storage->data(), rotary::DType::kI64, {cu.shape[0] - 1});
    }
    return rotary::Positions::packed(cu, so);
  }
  if (seq_offsets) refuse("seq_offsets needs cu_seqlens (the starts of packed thd sequences), got seq_offsets alone");
  if (ids) {
    if (batch_offsets)
      refuse("positions ids cannot be combined with batch_offsets (ids are each token's position), got both");
    return rotary::Positions::from_ids(to_view(*ids, where, "positions"));
  }
  rotary::Positions p = rotary::Positions::contiguous(offset);
  if (batch_offsets) p.batch_offsets = to_view(*batch_offsets, where, "batch_offsets");
  return p;
}

void bind_apply(nb::module_& m) {
  m.def(
      "_apply",
      [](const PySpec& spec, InArray q, std::optional<OutArray> q_out, std::optional<InArray> k,
         std::optional<OutArray> k_out, int64_t offset, std::optional<InArray> ids,
         std::optional<InArray> cu_seqlens, std::optional<InArray> seq_offsets,
         std::optional<InArray> batch_offsets, const std::string& layout, std::optional<std::string> pairing,
         bool inverse, std::optional<int64_t> seq_len, int threads, const std::string& backend, bool bf16_bits) {
        CallArrays c = build_args(q, q_out, k, k_out, layout, pairing, inverse, seq_len, threads, backend, bf16_bits);
        std::vector<int64_t> starts;
        c.args.positions = positions_of(offset, ids, cu_seqlens, seq_offsets, batch_offsets, "rotary_apply", &starts);
        rotary::Rope& rope = spec.rope();
        nb::gil_scoped_release release;
        rope.apply(c.args);
      },
      nb::arg("spec"), nb::arg("q"), nb::kw_only(), nb::arg("q_out").none() = nb::none(),
      nb::arg("k").none() = nb::none(), nb::arg("k_out").none() = nb::none(), nb::arg("offset") = 0,
      nb::arg("ids").none() = nb::none(), nb::arg("cu_seqlens").none() = nb::none(),
      nb::arg("seq_offsets").none() = nb::none(), nb::arg("batch_offsets").none() = nb::none(),
      nb::arg("layout") = "bshd", nb::arg("pairing").none() = nb::none(), nb::arg("inverse") = false,
      nb::arg("seq_len").none() = nb::none(), nb::arg("threads") = 0, nb::arg("backend") = "auto",
      nb::arg("bf16_bits") = false,
      "Private: rotary.apply/apply_qk after argument normalisation. q_out None = in place.");

  m.def(
      "_apply_cos_sin",
      [](InArray cos, InArray sin, InArray q, std::optional<OutArray> q_out, std::optional<InArray> k,
         std::optional<OutArray> k_out, int64_t offset, std::optional<InArray> ids,
         std::optional<InArray> cu_seqlens, std::optional<InArray> seq_offsets,
         std::optional<InArray> batch_offsets, const std::string& layout, std::optional<std::string> pairing,
         bool inverse, int threads, const std::string& backend, bool bf16_bits, bool table_bf16_bits) {
        CallArrays c =
            build_args(q, q_out, k, k_out, layout, pairing, inverse, std::nullopt, threads, backend, bf16_bits);
        std::vector<int64_t> starts;
        c.args.positions = positions_of(offset, ids, cu_seqlens, seq_offsets, batch_offsets, "rotary_apply", &starts);
        rotary::TensorView cv = to_view(cos, "rotary_apply", "cos", table_bf16_bits);
        rotary::TensorView sv = to_view(sin, "rotary_apply", "sin", table_bf16_bits);
        nb::gil_scoped_release release;
        rotary::apply_cos_sin(cv, sv, c.args);
      },
      nb::arg("cos"), nb::arg("sin"), nb::arg("q"), nb::kw_only(), nb::arg("q_out").none() = nb::none(),
      nb::arg("k").none() = nb::none(), nb::arg("k_out").none() = nb::none(), nb::arg("offset") = 0,
      nb::arg("ids").none() = nb::none(), nb::arg("cu_seqlens").none() = nb::none(),
      nb::arg("seq_offsets").none() = nb::none(), nb::arg("batch_offsets").none() = nb::none(),
      nb::arg("layout") = "bshd", nb::arg("pairing").none() = nb::none(), nb::arg("inverse") = false,
      nb::arg("threads") = 0, nb::arg("backend") = "auto", nb::arg("bf16_bits") = false,
      nb::arg("table_bf16_bits") = false,
      "Private: rotary.apply_cos_sin/apply_qk_cos_sin after argument normalisation (rotary::apply_cos_sin: rank-2 "
      "cos/sin indexed by any position scheme, or rank 3 per token). q_out None = in place.");

  m.def(
      "_onnx",
      [](InArray x, InArray cos, InArray sin, std::optional<InArray> position_ids, OutArray y, int64_t interleaved,
         int64_t rotary_embedding_dim, int64_t num_heads, bool inverse, int threads, const std::string& backend,
         bool bf16_bits, bool table_bf16_bits) {
        rotary::OnnxRotaryArgs a;
        constexpr const char* where = "onnx_rotary_embedding";
        a.x = to_view(x, where, "X", bf16_bits);
        a.cos_cache = to_view(cos, where, "cos_cache", table_bf16_bits);
        a.sin_cache = to_view(sin, where, "sin_cache", table_bf16_bits);
        if (position_ids) a.position_ids = to_view(*position_ids, where, "position_ids");
        a.y = to_view(y, where, "Y", bf16_bits);
        a.interleaved = interleaved;
        a.rotary_embedding_dim = rotary_embedding_dim;
        a.num_heads = num_heads;
        a.direction = inverse ? rotary::Direction::kInverse : rotary::Direction::kForward;
        a.threads = threads;
        a.backend = parse_backend(where, backend);
        nb::gil_scoped_release release;
        rotary::onnx_rotary_embedding(a);
      },
      nb::arg("x"), nb::arg("cos"), nb::arg("sin"), nb::kw_only(), nb::arg("position_ids").none() = nb::none(),
      nb::arg("y"), nb::arg("interleaved") = 0, nb::arg("rotary_embedding_dim") = 0, nb::arg("num_heads") = 0,
      nb::arg("inverse") = false, nb::arg("threads") = 0, nb::arg("backend") = "auto", nb::arg("bf16_bits") = false,
      nb::arg("table_bf16_bits") = false,
      "Private: the ONNX RotaryEmbedding-23 operator (rotary::onnx_rotary_embedding).");

  m.def(
      "_cos_sin",
      [](const PySpec& spec, InArray positions, std::optional<int64_t> seq_len) {
        const rotary::TensorView pv = to_view(positions, "rotary_cos_sin", "positions");
        const int64_t n = pv.rank == 1 ? pv.shape[0] : 0;
        const int64_t half = spec.spec().effective_rotary_dim() / 2;
        float* cos_data = new float[static_cast<size_t>(std::max<int64_t>(1, n * half))];
        nb::capsule cos_owner(cos_data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
        float* sin_data = new float[static_cast<size_t>(std::max<int64_t>(1, n * half))];
        nb::capsule sin_owner(sin_data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
        rotary::Rope& rope = spec.rope();
        {
          nb::gil_scoped_release release;
          rope.cos_sin(pv, seq_len, cos_data, sin_data);  // validates (rank 1, dtype, values) first
        }
        using Out = nb::ndarray<nb::numpy, float, nb::ndim<2>>;
        return std::make_tuple(Out(cos_data, {size_t(n), size_t(half)}, cos_owner),
                               Out(sin_data, {size_t(n), size_t(half)}, sin_owner));
      },
      nb::arg("spec"), nb::arg("positions"), nb::arg("seq_len").none() = nb::none(),
      "Private: exact f32 cos/sin rows [N, rotary_dim/2] (attention factor folded in) for 1-D positions "
      "(rotary::Rope::cos_sin).");
}

}  // namespace rotary_py

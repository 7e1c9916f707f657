// Binds the apply entry points (spec tables, caller cos/sin) and cos/sin row queries; the GIL is released in kernels.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"

namespace rotary_py {

namespace {

/// The arrays and options shared by every apply entry point (private API used by rotary/__init__.py).
struct CallArrays {
  rotary::ApplyArgs args;
  bool empty = false;
};

CallArrays build_args(const InArray& q, std::optional<OutArray>& q_out, std::optional<InArray>& k,
                      std::optional<OutArray>& k_out, const std::string& layout, std::optional<std::string> pairing,
                      bool inverse, std::optional<int64_t> seq_len, int threads, const std::string& backend,
                      bool bf16_bits) {
  CallArrays c;
  rotary::ApplyArgs& a = c.args;
  a.q = to_view(q, "x", bf16_bits);
  if (q_out) a.q_out = to_view(*q_out, "out", bf16_bits);
  if (k) a.k = to_view(*k, "k", bf16_bits);
  if (k_out) a.k_out = to_view(*k_out, "k_out", bf16_bits);
  a.layout = parse_layout(layout);
  if (pairing) a.pairing = parse_pairing(*pairing);
  a.direction = inverse ? rotary::Direction::kInverse : rotary::Direction::kForward;
  a.seq_len = seq_len;
  a.threads = threads;
  a.backend = parse_backend(backend);
  c.empty = is_empty(a.q) && (!a.k.present() || is_empty(a.k));
  return c;
}

void set_positions(rotary::ApplyArgs& a, int64_t offset, const std::optional<InArray>& ids,
                   const std::optional<InArray>& cu_seqlens, const std::optional<InArray>& seq_offsets,
                   const std::optional<InArray>& batch_offsets) {
  if (cu_seqlens) {
    a.positions = rotary::Positions::packed(to_view(*cu_seqlens, "cu_seqlens"),
                                            seq_offsets ? to_view(*seq_offsets, "seq_offsets") : rotary::TensorView{});
  } else if (ids) {
    a.positions = rotary::Positions::from_ids(to_view(*ids, "positions"));
  } else {
    a.positions = rotary::Positions::contiguous(offset);
    if (batch_offsets) a.positions.batch_offsets = to_view(*batch_offsets, "batch_offsets");
  }
}

template <class T>
double read_position(const void* data, int64_t i) {
  return static_cast<double>(static_cast<const T*>(data)[i]);
}

}  // namespace

void bind_apply(nb::module_& m) {
  m.def(
      "_apply",
      [](const PySpec& spec, InArray q, std::optional<OutArray> q_out, std::optional<InArray> k,
         std::optional<OutArray> k_out, int64_t offset, std::optional<InArray> ids,
         std::optional<InArray> cu_seqlens, std::optional<InArray> seq_offsets,
         std::optional<InArray> batch_offsets, const std::string& layout, std::optional<std::string> pairing,
         bool inverse, std::optional<int64_t> seq_len, int threads, const std::string& backend, bool bf16_bits) {
        CallArrays c = build_args(q, q_out, k, k_out, layout, pairing, inverse, seq_len, threads, backend, bf16_bits);
        set_positions(c.args, offset, ids, cu_seqlens, seq_offsets, batch_offsets);
        rotary::Rope& rope = spec.rope();
        if (c.empty) return;
        nb::gil_scoped_release release;
        rope.apply(c.args);
      },
      nb::arg("spec"), nb::arg("q"), nb::arg("q_out").none(), nb::arg("k").none(), nb::arg("k_out").none(),
      nb::arg("offset"), nb::arg("ids").none(), nb::arg("cu_seqlens").none(), nb::arg("seq_offsets").none(),
      nb::arg("batch_offsets").none(), nb::arg("layout"), nb::arg("pairing").none(), nb::arg("inverse"),
      nb::arg("seq_len").none(), nb::arg("threads"), nb::arg("backend"), nb::arg("bf16_bits"),
      "Private: rotary.apply/apply_qk after argument normalisation. q_out None = in place.");

  m.def(
      "_apply_cos_sin",
      [](InArray cos, InArray sin, InArray q, std::optional<OutArray> q_out, std::optional<InArray> k,
         std::optional<OutArray> k_out, std::optional<InArray> ids, const std::string& layout,
         std::optional<std::string> pairing, bool inverse, int threads, const std::string& backend, bool bf16_bits,
         bool table_bf16_bits) {
        CallArrays c =
            build_args(q, q_out, k, k_out, layout, pairing, inverse, std::nullopt, threads, backend, bf16_bits);
        if (ids) c.args.positions = rotary::Positions::from_ids(to_view(*ids, "position_ids"));
        rotary::TensorView cv = to_view(cos, "cos", table_bf16_bits);
        rotary::TensorView sv = to_view(sin, "sin", table_bf16_bits);
        if (c.empty) return;
        nb::gil_scoped_release release;
        rotary::apply_cos_sin(cv, sv, c.args);
      },
      nb::arg("cos"), nb::arg("sin"), nb::arg("q"), nb::arg("q_out").none(), nb::arg("k").none(),
      nb::arg("k_out").none(), nb::arg("ids").none(), nb::arg("layout"), nb::arg("pairing").none(),
      nb::arg("inverse"), nb::arg("threads"), nb::arg("backend"), nb::arg("bf16_bits"), nb::arg("table_bf16_bits"),
      "Private: rotation with caller cos/sin (rank 2 + ids, or rank 3 per token), ONNX semantics.");

  m.def(
      "_onnx",
      [](InArray x, InArray cos, InArray sin, std::optional<InArray> position_ids, OutArray y, int64_t interleaved,
         int64_t rotary_embedding_dim, int64_t num_heads, int threads, const std::string& backend, bool bf16_bits,
         bool table_bf16_bits) {
        rotary::OnnxRotaryArgs a;
        a.x = to_view(x, "X", bf16_bits);
        a.cos_cache = to_view(cos, "cos_cache", table_bf16_bits);
        a.sin_cache = to_view(sin, "sin_cache", table_bf16_bits);
        if (position_ids) a.position_ids = to_view(*position_ids, "position_ids");
        a.y = to_view(y, "Y", bf16_bits);
        a.interleaved = interleaved;
        a.rotary_embedding_dim = rotary_embedding_dim;
        a.num_heads = num_heads;
        a.threads = threads;
        a.backend = parse_backend(backend);
        if (is_empty(a.x)) return;
        nb::gil_scoped_release release;
        rotary::onnx_rotary_embedding(a);
      },
      nb::arg("x"), nb::arg("cos"), nb::arg("sin"), nb::arg("position_ids").none(), nb::arg("y"),
      nb::arg("interleaved"), nb::arg("rotary_embedding_dim"), nb::arg("num_heads"), nb::arg("threads"),
      nb::arg("backend"), nb::arg("bf16_bits"), nb::arg("table_bf16_bits"),
      "Private: the ONNX RotaryEmbedding-23 operator (rotary::onnx_rotary_embedding).");

  m.def(
      "_cos_sin",
      [](const PySpec& spec, InArray positions, std::optional<int64_t> seq_len) {
        rotary::TensorView pv = to_view(positions, "positions");
        if (pv.rank != 1)
          throw nb::value_error(("[rotary_cos_sin] positions must be 1-D, got rank " + std::to_string(pv.rank)).c_str());
        if (spec.spec().mrope.enabled())
          throw nb::value_error("[rotary_cos_sin] M-RoPE specs have per-section positions; use rotary.apply");
        const int64_t n = pv.shape[0];
        std::vector<double> pos(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          const int64_t off = i * pv.strides[0];
          switch (pv.dtype) {
            case rotary::DType::kI32: pos[i] = read_position<int32_t>(pv.data, off); break;
            case rotary::DType::kI64: pos[i] = read_position<int64_t>(pv.data, off); break;
            case rotary::DType::kF32: pos[i] = read_position<float>(pv.data, off); break;
            case rotary::DType::kF64: pos[i] = read_position<double>(pv.data, off); break;
            default: throw nb::type_error("[rotary_cos_sin] positions must be int32, int64, float32 or float64");
          }
          if (!(pos[i] >= 0) || !std::isfinite(pos[i]))
            throw nb::value_error(("[rotary_cos_sin] positions must be finite and >= 0, got " +
                                   std::to_string(pos[i]) + " at index " + std::to_string(i)).c_str());
        }
        rotary::Rope& rope = spec.rope();
        const int64_t half = spec.spec().effective_rotary_dim() / 2;
        float* cos_data = new float[std::max<int64_t>(1, n * half)];
        float* sin_data = new float[std::max<int64_t>(1, n * half)];
        nb::capsule cos_owner(cos_data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
        nb::capsule sin_owner(sin_data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
        {
          nb::gil_scoped_release release;
          double max_pos = 0;
          bool integral = true;
          for (double p : pos) {
            max_pos = std::max(max_pos, p);
            integral = integral && p == std::floor(p);
          }
          const int64_t seen = seq_len ? *seq_len : static_cast<int64_t>(std::floor(max_pos)) + 1;
          rotary::Frequencies f = rope.frequencies(seen);
          rotary::CosSinTable& table = rope.table();
          const bool use_table = integral && n > 0 && f.inv_freq == table.frequencies().inv_freq &&
                                 f.attention_factor == table.frequencies().attention_factor &&
                                 max_pos < static_cast<double>(table.max_positions());
          if (use_table) {
            rotary::CosSinTable::View v = table.view_for(static_cast<int64_t>(max_pos) + 1);
            for (int64_t i = 0; i < n; ++i) {
              const int64_t p = static_cast<int64_t>(pos[i]);
              std::memcpy(cos_data + i * half, v.cos(p), sizeof(float) * half);
              std::memcpy(sin_data + i * half, v.sin(p), sizeof(float) * half);
            }
          } else {
            for (int64_t i = 0; i < n; ++i)
              rotary::compute_cos_sin_row(f, pos[i], cos_data + i * half, sin_data + i * half);
          }
        }
        using Out = nb::ndarray<nb::numpy, float, nb::ndim<2>>;
        return std::make_tuple(Out(cos_data, {size_t(n), size_t(half)}, cos_owner),
                               Out(sin_data, {size_t(n), size_t(half)}, sin_owner));
      },
      nb::arg("spec"), nb::arg("positions"), nb::arg("seq_len").none() = nb::none(),
      "Private: exact f32 cos/sin rows [N, rotary_dim/2] (attention factor folded in) for 1-D positions.");
}

}  // namespace rotary_py

// Binds rotary check / export (rotary.check, rotary.export_tables) and the .npy/.safetensors loader, tensors as raw bytes.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "bindings.h"
#include "rotary/parity.h"

namespace rotary_py {
namespace {

rotary::DType dtype_from(const std::string& s) {
  if (s == "f32") return rotary::DType::kF32;
  if (s == "f16") return rotary::DType::kF16;
  if (s == "bf16") return rotary::DType::kBF16;
  if (s == "f64") return rotary::DType::kF64;
  if (s == "i32") return rotary::DType::kI32;
  if (s == "i64") return rotary::DType::kI64;
  throw nb::type_error(("[rotary_check] unsupported dtype \"" + s + "\" (expected float32, float16, bfloat16, float64, "
                        "int32 or int64)").c_str());
}

/// [(name, dtype, shape, bytes)] + metadata -> TensorFile.
rotary::TensorFile to_file(const nb::list& tensors, const nb::dict& metadata) {
  rotary::TensorFile f;
  for (nb::handle item : tensors) {
    nb::tuple t = nb::cast<nb::tuple>(item);
    rotary::HostArray a;
    a.dtype = dtype_from(nb::cast<std::string>(t[1]));
    a.shape = nb::cast<std::vector<int64_t>>(t[2]);
    nb::bytes b = nb::cast<nb::bytes>(t[3]);
    const auto* p = static_cast<const unsigned char*>(static_cast<const void*>(b.c_str()));
    a.data.assign(p, p + b.size());
    if (static_cast<uint64_t>(a.numel()) * rotary::dtype_size(a.dtype) != a.data.size())
      throw nb::value_error("[rotary_check] tensor data does not match its shape");
    f.tensors.emplace_back(nb::cast<std::string>(t[0]), std::move(a));
  }
  for (auto [k, v] : metadata) f.metadata[nb::cast<std::string>(k)] = nb::cast<std::string>(v);
  return f;
}

nb::tuple from_file(const rotary::TensorFile& f) {
  nb::list tensors;
  for (const auto& [name, a] : f.tensors)
    tensors.append(nb::make_tuple(name, std::string(rotary::dtype_name(a.dtype)), a.shape,
                                  nb::bytes(reinterpret_cast<const char*>(a.data.data()), a.data.size())));
  nb::dict meta;
  for (const auto& [k, v] : f.metadata) meta[k.c_str()] = v;
  return nb::make_tuple(tensors, meta);
}

rotary::TableKind kind_from(const std::string& s) {
  if (s == "inv_freq") return rotary::TableKind::kInvFreq;
  if (s == "cos_sin") return rotary::TableKind::kCosSin;
  if (s == "rotated") return rotary::TableKind::kRotated;
  throw nb::value_error(("[rotary_check] kind must be inv_freq, cos_sin or rotated, got " + rotary::quote_value(s)).c_str());
}

}  // namespace

void bind_check(nb::module_& m) {
  m.def("_check",
        [](const PySpec& spec, const std::string& kind, const std::string& layout, const nb::list& tensors,
           const nb::dict& metadata, std::optional<int64_t> max_pos) {
          rotary::CheckInput in;
          in.kind = kind_from(kind);
          in.layout = rotary::parse_engine_layout(layout);
          in.tensors = to_file(tensors, metadata);
          in.max_pos = max_pos;
          rotary::CheckResult r;
          {
            nb::gil_scoped_release release;
            r = rotary::check_parity(spec.spec(), in);
          }
          return nb::make_tuple(rotary::check_result_json(r), rotary::check_result_text(r));
        },
        nb::arg("spec"), nb::arg("kind"), nb::arg("layout"), nb::arg("tensors"), nb::arg("metadata"),
        nb::arg("max_pos").none());
  m.def("_export",
        [](const PySpec& spec, const std::string& layout, const std::string& what, const std::string& dtype,
           int64_t positions) {
          rotary::ExportOptions o;
          o.layout = rotary::parse_engine_layout(layout, "rotary_export");
          o.what = kind_from(what);
          o.dtype = dtype_from(dtype);
          o.positions = positions;
          return from_file(rotary::export_tables(spec.spec(), o));
        },
        nb::arg("spec"), nb::arg("layout"), nb::arg("what"), nb::arg("dtype"), nb::arg("positions"));
  m.def("_load_tensor_file",
        [](const std::string& path, const std::string& npy_name) { return from_file(rotary::load_tensor_file(path, npy_name)); },
        nb::arg("path"), nb::arg("npy_name"));
  m.def("_save_safetensors",
        [](const std::string& path, const nb::list& tensors, const nb::dict& metadata) {
          rotary::write_file_atomically(path, rotary::safetensors_serialize(to_file(tensors, metadata)));
        },
        nb::arg("path"), nb::arg("tensors"), nb::arg("metadata"));
}

}  // namespace rotary_py

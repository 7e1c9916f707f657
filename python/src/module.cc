// The rotary._rotary extension module: error translation, array conversion and module definition.
#include <cstdio>
#include <cstring>
#include <string>

#include "bindings.h"

namespace rotary_py {

void register_errors() {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const rotary::Error& e) {
      PyObject* type = PyExc_RuntimeError;
      switch (e.kind()) {
        case rotary::Error::Kind::kInvalidArgument:
          // The core marks a wrong element type (dtype) as such; Python spells it TypeError.
          type = e.cause() == rotary::Error::Cause::kType ? PyExc_TypeError : PyExc_ValueError;
          break;
        case rotary::Error::Kind::kOutOfRange: type = PyExc_ValueError; break;
        case rotary::Error::Kind::kUnsupported: type = PyExc_NotImplementedError; break;
        case rotary::Error::Kind::kIo: type = PyExc_OSError; break;
        case rotary::Error::Kind::kInternal: type = PyExc_RuntimeError; break;
      }
      // A message may quote bytes that are not UTF-8 (a file name from a non-UTF-8 file system): shown escaped.
      const char* what = e.what();
      PyObject* text = PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "backslashreplace");
      if (text == nullptr) {  // (out of memory): the message's own "[entry point]" prefix, if it has one
        char shown[160];
        std::size_t n = 0;
        if (what[0] == '[')
          while (n < 100 && what[n] != '\0' && what[n] != ']' && static_cast<unsigned char>(what[n]) < 0x80) ++n;
        if (n > 1 && what[n] == ']')
          std::snprintf(shown, sizeof shown, "%.*s] (message not decodable)", static_cast<int>(n), what);
        else
          std::snprintf(shown, sizeof shown, "(message not decodable)");
        PyErr_SetString(type, shown);
        return;
      }
      PyErr_SetObject(type, text);
      Py_DECREF(text);
    }
  });
}

namespace {

template <class Array>
rotary::TensorView view_impl(const Array& a, const char* where, const char* what, int bits_as) {
  rotary::TensorView v;
  const auto dt = a.dtype();
  const auto code = static_cast<nb::dlpack::dtype_code>(dt.code);
  bool ok = dt.lanes == 1;
  if (ok) {
    if (bits_as >= 0 && code == nb::dlpack::dtype_code::UInt &&
        dt.bits == 8 * rotary::dtype_size(static_cast<rotary::DType>(bits_as)))
      v.dtype = static_cast<rotary::DType>(bits_as);
    else if (code == nb::dlpack::dtype_code::Int && dt.bits == 8) v.dtype = rotary::DType::kI8;
    else if (code == nb::dlpack::dtype_code::Float && dt.bits == 32) v.dtype = rotary::DType::kF32;
    else if (code == nb::dlpack::dtype_code::Float && dt.bits == 16) v.dtype = rotary::DType::kF16;
    else if (code == nb::dlpack::dtype_code::Float && dt.bits == 64) v.dtype = rotary::DType::kF64;
    else if (code == nb::dlpack::dtype_code::Bfloat && dt.bits == 16) v.dtype = rotary::DType::kBF16;
    else if (code == nb::dlpack::dtype_code::Int && dt.bits == 32) v.dtype = rotary::DType::kI32;
    else if (code == nb::dlpack::dtype_code::Int && dt.bits == 64) v.dtype = rotary::DType::kI64;
    else ok = false;
  }
  if (!ok) {
    throw nb::type_error((std::string("[") + where + "] " + what +
                          " has an unsupported dtype (code " + std::to_string(int(dt.code)) + ", " +
                          std::to_string(int(dt.bits)) + " bits); expected float32, float16, bfloat16, float64 "
                          "(int32/int64 for positions; int8, float8_e4m3fn, float8_e5m2 for caches and fp8 outputs)" +
                          // fp8 caches kept as raw bytes (older vLLM allocates them as uint8)
                          (code == nb::dlpack::dtype_code::UInt && dt.bits == 8 &&
                                   (std::strstr(what, "cache") != nullptr || std::strstr(what, "out") != nullptr)
                               ? std::string("; fp8 bytes held as uint8: pass a float8 view of them, e.g. "
                                             "cache.view(torch.float8_e4m3fn) or ml_dtypes.float8_e4m3fn for numpy")
                               : std::string()))
                             .c_str());
  }
  if (a.ndim() > static_cast<size_t>(rotary::kMaxRank)) {
    throw nb::value_error((std::string("[") + where + "] " + what + " must have rank <= " +
                           std::to_string(rotary::kMaxRank) + ", got rank " + std::to_string(a.ndim())).c_str());
  }
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = static_cast<int64_t>(a.shape(i));
    v.strides[i] = a.stride(i);
  }
  return v;
}

}  // namespace

rotary::TensorView to_view(const InArray& a, const char* where, const char* what, bool bf16_bits) {
  return view_impl(a, where, what, bf16_bits ? 2 : -1);
}
rotary::TensorView to_view(const OutArray& a, const char* where, const char* what, bool bf16_bits) {
  return view_impl(a, where, what, bf16_bits ? 2 : -1);
}
rotary::TensorView to_view_as(const InArray& a, const char* where, const char* what, int bits_as) {
  return view_impl(a, where, what, bits_as);
}
rotary::TensorView to_view_as(const OutArray& a, const char* where, const char* what, int bits_as) {
  return view_impl(a, where, what, bits_as);
}

}  // namespace rotary_py

NB_MODULE(_rotary, m) {
  m.doc() = "Native core of the rotary package (use the `rotary` package, not this module directly).";
  m.attr("__version__") = ROTARY_VERSION_STRING;
  // rotary.torch.patch() stores Spec objects inside transformers' module globals (patched forward
  // functions), which Python tears down after this extension at interpreter exit; nanobind then
  // reports those still-referenced objects as "leaks". They are not leaks of ours, so the report is off.
  nanobind::set_leak_warnings(false);
  rotary_py::register_errors();
  rotary_py::bind_spec(m);
  rotary_py::bind_apply(m);
  rotary_py::bind_multimodal(m);
  rotary_py::bind_check(m);
  rotary_py::bind_torch_entry(m);
  rotary_py::bind_numpy_entry(m);
  rotary_py::bind_prologue(m);
}

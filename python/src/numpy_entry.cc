// Binds the decode fast path of rotary.apply / apply_qk for plain numpy arrays: buffer protocol in C++, no DLPack.
//
// rotary/__init__.py calls it first for the common call (numpy float32/float16/float64 arrays, an int offset, the
// spec's pairing, forward, outputs given or in place). It returns False, having done nothing, for anything it does
// not take as it is (another dtype or array type, an output of another shape/dtype or read-only, a broadcast or
// reversed input axis), and the general path then runs with its own messages. Errors from the core (a bad layout,
// head_dim, position) are raised as on the general path, since both build the same rotary::ApplyArgs.
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "bindings.h"

namespace rotary_py {

namespace {

/// A Py_buffer released on scope exit.
struct Buffer {
  Py_buffer view{};
  bool held = false;
  ~Buffer() {
    if (held) PyBuffer_Release(&view);
  }
};

bool dtype_of(const char* format, rotary::DType& d) {
  if (format == nullptr) return false;
  if (*format == '<' || *format == '=' || *format == '@') ++format;  // native little-endian (x86, Arm)
  if (format[0] == '\0' || format[1] != '\0') return false;
  switch (format[0]) {
    case 'f': d = rotary::DType::kF32; return true;
    case 'e': d = rotary::DType::kF16; return true;
    case 'd': d = rotary::DType::kF64; return true;
    default: return false;
  }
}

/// Fills `v` from a numpy array's buffer; false (Python error cleared) if the array is not one the fast path takes.
bool view_of(nb::handle a, bool writable, bool input, Buffer& b, rotary::TensorView& v) {
  const int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(a.ptr(), &b.view, flags) != 0) {
    PyErr_Clear();
    return false;
  }
  b.held = true;
  if (!dtype_of(b.view.format, v.dtype) || b.view.ndim > rotary::kMaxRank || b.view.ndim < 1) return false;
  const Py_ssize_t item = b.view.itemsize;
  v.rank = b.view.ndim;
  v.data = b.view.buf;
  for (int i = 0; i < v.rank; ++i) {
    const Py_ssize_t st = b.view.strides[i];
    v.shape[i] = b.view.shape[i];
    if (st % item != 0) return false;
    v.strides[i] = st / item;
    if (v.shape[i] == 0) return false;                          // empty: the general path's rules
    if (input && v.strides[i] <= 0 && v.shape[i] > 1) return false;  // broadcast / reversed: copied there
  }
  return true;
}

bool same_geometry(const rotary::TensorView& a, const rotary::TensorView& b) {
  if (a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

}  // namespace

void bind_numpy_entry(nb::module_& m) {
  m.def(
      "_apply_numpy",
      [](const PySpec& spec, nb::handle q, nb::handle k, nb::handle q_out, nb::handle k_out, nb::handle offset_obj,
         const std::string& layout, nb::handle threads_obj) -> bool {
        int overflow = 0;
        const long threads_l = PyLong_AsLongAndOverflow(threads_obj.ptr(), &overflow);
        if (overflow != 0 || (threads_l == -1 && PyErr_Occurred()) || threads_l < 0 || threads_l > INT32_MAX) {
          PyErr_Clear();
          return false;  // a negative or huge count: the general path names it or caps it
        }
        const int threads = static_cast<int>(threads_l);
        const long long offset = PyLong_AsLongLongAndOverflow(offset_obj.ptr(), &overflow);
        if (overflow != 0 || (offset == -1 && PyErr_Occurred())) {
          PyErr_Clear();
          return false;  // not an int64: the general path says so
        }
        rotary::ApplyArgs a;
        Buffer bq, bk, bqo, bko;
        const bool in_place = q_out.is_none();
        if (!view_of(q, in_place, true, bq, a.q)) return false;
        if (!in_place) {
          if (!view_of(q_out, true, false, bqo, a.q_out) || !same_geometry(a.q, a.q_out)) return false;
        }
        if (!k.is_none()) {
          if (!view_of(k, in_place, true, bk, a.k) || a.k.dtype != a.q.dtype) return false;
          if (!in_place && (!view_of(k_out, true, false, bko, a.k_out) || !same_geometry(a.k, a.k_out))) return false;
        }
        a.positions = rotary::Positions::contiguous(offset);
        a.layout = parse_layout("rotary_apply", layout);
        a.threads = threads;
        rotary::Rope& rope = spec.rope();
        const int64_t bytes = static_cast<int64_t>(bq.view.len) + (bk.held ? static_cast<int64_t>(bk.view.len) : 0);
        if (bytes >= 256 * 1024) {
          nb::gil_scoped_release release;
          rope.apply(a);
        } else {
          rope.apply(a);  // a decode-sized call: releasing and re-taking the GIL costs more than the kernel
        }
        return true;
      },
      nb::arg("spec"), nb::arg("q"), nb::arg("k").none(), nb::arg("q_out").none(), nb::arg("k_out").none(),
      nb::arg("offset"), nb::arg("layout"), nb::arg("threads"),
      "Private (rotary.apply/apply_qk): the numpy fast path. Rotates q (and k) at positions offset + s into q_out/k_out "
      "(None: in place) and returns True, or returns False having done nothing when the arrays are not plain "
      "float32/float16/float64 numpy buffers of matching geometry.");
}

}  // namespace rotary_py

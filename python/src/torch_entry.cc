// Binds pointer-level entry points for rotary.torch's operators: torch tensors are read without __dlpack__().
//
// torch.Tensor.__dlpack__ is Python code costing several microseconds per tensor, which dominated a decode-sized
// operator call. These entries read a plain torch.Tensor or nn.Parameter through torch's DLPack C exchange table
// (`__dlpack_c_exchange_api__`, torch >= 2.10: one C call filling a borrowed DLTensor), and any other tensor, or
// any tensor that table declines, through data_ptr(), shape, stride(), dtype and is_neg() by the C API. They are
// private (rotary/_torch_ops.py and rotary.prologue are the callers); inputs that the core cannot read as they are
// (a broadcast axis, a negative-bit view) are reported back so the caller can materialise them and call again.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bindings.h"
#include "rotary/prologue.h"

namespace rotary_py {

namespace {

/// torch's dtype objects and the attribute names read from tensors, looked up once.
struct TorchNames {
  PyObject* f32 = nullptr;
  PyObject* f16 = nullptr;
  PyObject* bf16 = nullptr;
  PyObject* f64 = nullptr;
  PyObject* i32 = nullptr;
  PyObject* i64 = nullptr;
  PyObject* data_ptr = nullptr;
  PyObject* shape = nullptr;
  PyObject* stride = nullptr;
  PyObject* dtype = nullptr;
  PyObject* is_neg = nullptr;
  PyObject* is_cpu = nullptr;
  PyObject* requires_grad = nullptr;
  PyObject* is_grad_enabled = nullptr;  ///< torch.is_grad_enabled
  PyObject* tensor_type = nullptr;      ///< torch.Tensor
  PyObject* parameter_type = nullptr;   ///< torch.nn.Parameter
  /// The DLPack exchange table's borrowed-DLTensor export (null: torch has none of version 1). It fills `out` with
  /// pointers into the tensor's own shape and strides, valid while the tensor lives and is not resized.
  int (*dltensor_of)(void* py_object, nb::dlpack::dltensor* out) = nullptr;
};

/// DLPack's DLPackExchangeAPI, version 1 (dlpack.h v1.3): a versioned header, then five function pointers; only
/// `dltensor_from_py_object_no_sync` is called here.
struct DLPackExchangeTable {
  uint32_t major, minor;
  void* prev_api;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, nb::dlpack::dltensor* out);
  void* current_work_stream;
};

/// The borrowed-DLTensor export of torch's exchange table (type(tensor).__dlpack_c_exchange_api__), or null.
auto find_dltensor_export(nb::handle tensor_type) -> int (*)(void*, nb::dlpack::dltensor*) {
  PyObject* cap = PyObject_GetAttrString(tensor_type.ptr(), "__dlpack_c_exchange_api__");
  if (cap == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  auto* table = static_cast<const DLPackExchangeTable*>(PyCapsule_GetPointer(cap, "dlpack_exchange_api"));
  Py_DECREF(cap);  // the table is static in torch, alive for the process
  if (table == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  return table->major == 1 ? table->dltensor_from_py_object_no_sync : nullptr;
}

const TorchNames& names() {
  // Built on first use (rotary.torch has imported torch by then); the references live for the process.
  static const TorchNames n = [] {
    TorchNames t;
    nb::module_ torch = nb::module_::import_("torch");
    auto keep = [&](const char* attr) { return nb::object(torch.attr(attr)).release().ptr(); };
    t.f32 = keep("float32");
    t.f16 = keep("float16");
    t.bf16 = keep("bfloat16");
    t.f64 = keep("float64");
    t.i32 = keep("int32");
    t.i64 = keep("int64");
    t.data_ptr = PyUnicode_InternFromString("data_ptr");
    t.shape = PyUnicode_InternFromString("shape");
    t.stride = PyUnicode_InternFromString("stride");
    t.dtype = PyUnicode_InternFromString("dtype");
    t.is_neg = PyUnicode_InternFromString("is_neg");
    t.is_cpu = PyUnicode_InternFromString("is_cpu");
    t.requires_grad = PyUnicode_InternFromString("requires_grad");
    t.is_grad_enabled = keep("is_grad_enabled");
    t.tensor_type = keep("Tensor");
    t.parameter_type = nb::object(torch.attr("nn").attr("Parameter")).release().ptr();
    t.dltensor_of = find_dltensor_export(t.tensor_type);
    return t;
  }();
  return n;
}

/// Whether torch has been imported (without importing it); once true, true for the process.
bool torch_imported() {
  static bool seen = false;
  if (seen) return true;
  PyObject* m = PyImport_GetModule(nb::str("torch").ptr());
  if (m == nullptr) {
    if (PyErr_Occurred()) PyErr_Clear();
    return false;
  }
  const bool real = m != Py_None;  // sys.modules["torch"] = None blocks the import
  Py_DECREF(m);
  return seen = real;
}

/// torch.is_grad_enabled() (a Python error counts as enabled: the generic path decides).
bool grad_enabled() {
  PyObject* r = PyObject_CallNoArgs(names().is_grad_enabled);
  if (r == nullptr) {
    PyErr_Clear();
    return true;
  }
  const bool on = r == Py_True;
  Py_DECREF(r);
  return on;
}

/// t.requires_grad (an error counts as true).
bool requires_grad(nb::handle t) {
  PyObject* r = PyObject_GetAttr(t.ptr(), names().requires_grad);
  if (r == nullptr) {
    PyErr_Clear();
    return true;
  }
  const bool on = r != Py_False;
  Py_DECREF(r);
  return on;
}

nb::object call0(nb::handle t, PyObject* name) {
  PyObject* r = PyObject_CallMethodNoArgs(t.ptr(), name);
  if (!r) throw nb::python_error();
  return nb::steal(r);
}

nb::object getattr(nb::handle t, PyObject* name) {
  PyObject* r = PyObject_GetAttr(t.ptr(), name);
  if (!r) throw nb::python_error();
  return nb::steal(r);
}

rotary::DType torch_dtype(nb::handle t, const char* where, const char* what) {
  const TorchNames& n = names();
  nb::object d = getattr(t, n.dtype);
  PyObject* p = d.ptr();
  if (p == n.f32) return rotary::DType::kF32;
  if (p == n.bf16) return rotary::DType::kBF16;
  if (p == n.f16) return rotary::DType::kF16;
  if (p == n.f64) return rotary::DType::kF64;
  if (p == n.i64) return rotary::DType::kI64;
  if (p == n.i32) return rotary::DType::kI32;
  throw nb::type_error((std::string("[") + where + "] " + what + " has dtype " + nb::cast<std::string>(nb::str(d)) +
                        "; expected torch.float32, float16, bfloat16 or float64 (int32/int64 for positions)")
                           .c_str());
}

/// Whether the entries use torch's exchange table where it exists (off only in tests of the attribute reads).
bool g_table_reads = true;

/// The view of `t` through torch's DLPack exchange table, for a plain torch.Tensor or nn.Parameter on the CPU of
/// a dtype the entries take (dtype, shape, strides, data); false for anything else, which the attribute reads then
/// take (and name in errors).
bool dlpack_view(nb::handle t, rotary::TensorView& v) {
  const TorchNames& n = names();
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(t.ptr()));
  if (!g_table_reads || n.dltensor_of == nullptr || (type != n.tensor_type && type != n.parameter_type)) return false;
  nb::dlpack::dltensor d;
  if (n.dltensor_of(t.ptr(), &d) != 0) {  // e.g. a sparse or meta tensor: torch declines it
    PyErr_Clear();
    return false;
  }
  constexpr int32_t kDLCPU = 1;
  if (d.device.device_type != kDLCPU || d.dtype.lanes != 1 || d.ndim < 0 || d.ndim > rotary::kMaxRank) return false;
  const auto code = static_cast<nb::dlpack::dtype_code>(d.dtype.code);
  const int bits = d.dtype.bits;
  using C = nb::dlpack::dtype_code;
  if (code == C::Float && bits == 32) v.dtype = rotary::DType::kF32;
  else if (code == C::Float && bits == 16) v.dtype = rotary::DType::kF16;
  else if (code == C::Bfloat && bits == 16) v.dtype = rotary::DType::kBF16;
  else if (code == C::Float && bits == 64) v.dtype = rotary::DType::kF64;
  else if (code == C::Int && bits == 64) v.dtype = rotary::DType::kI64;
  else if (code == C::Int && bits == 32) v.dtype = rotary::DType::kI32;
  else return false;  // the attribute reads name the dtype in their error
  v.rank = d.ndim;
  int64_t compact = 1;  // DLPack allows null strides for a row-major tensor
  for (int i = d.ndim - 1; i >= 0; --i) {
    v.shape[i] = d.shape[i];
    v.strides[i] = d.strides != nullptr ? d.strides[i] : compact;
    compact *= d.shape[i];
  }
  v.data = static_cast<char*>(d.data) + d.byte_offset;
  return true;
}

/// The view of `t` read attribute by attribute: dtype, is_cpu (unless `device`), shape, stride(), data_ptr(); errors
/// name `what` in the words of the entry point `where`.
rotary::TensorView attribute_view(nb::handle t, const char* where, const char* what, bool device) {
  const TorchNames& n = names();
  rotary::TensorView v;
  v.dtype = torch_dtype(t, where, what);
  if (!device && !PyObject_IsTrue(getattr(t, n.is_cpu).ptr()))
    throw nb::value_error(
        (std::string("[") + where + "] " + what + " is not a CPU tensor (the other tensors of this call are)").c_str());
  nb::object shape = getattr(t, n.shape);
  nb::object stride = call0(t, n.stride);
  const Py_ssize_t rank = PyTuple_GET_SIZE(shape.ptr());
  if (rank > rotary::kMaxRank)
    throw nb::value_error((std::string("[") + where + "] " + what + " must have rank <= " +
                           std::to_string(rotary::kMaxRank) + ", got rank " + std::to_string(rank))
                              .c_str());
  v.rank = static_cast<int>(rank);
  for (Py_ssize_t i = 0; i < rank; ++i) {
    v.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), i));
    v.strides[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride.ptr(), i));
  }
  v.data = PyLong_AsVoidPtr(call0(t, n.data_ptr).ptr());
  if (PyErr_Occurred()) throw nb::python_error();
  return v;
}

/// A TensorView of a torch tensor (through the exchange table, else attribute by attribute). `needs_copy` is set
/// when the core cannot read the memory as the tensor's value: an axis longer than 1 with a zero stride (inputs
/// only; outputs are never copied) or a negative-bit view, which both ways of reading give as its raw memory.
/// Errors name `what` in the words of the entry point `where` (a constant: nothing is formatted unless it fails).
rotary::TensorView torch_view(nb::handle t, const char* where, const char* what, bool device, bool& needs_copy) {
  rotary::TensorView v;
  if (!dlpack_view(t, v)) v = attribute_view(t, where, what, device);
  for (int i = 0; i < v.rank; ++i)
    if (v.strides[i] == 0 && v.shape[i] > 1) needs_copy = true;
  if (PyObject_IsTrue(call0(t, names().is_neg).ptr())) needs_copy = true;
  return v;
}

// Copy requests reported to the caller (bit per argument).
constexpr int kCopyQ = 1, kCopyK = 2, kCopyPositions = 4, kCopyCos = 8, kCopySin = 16;
// Calls moving less than this run with the GIL held (releasing and re-taking it costs more than the kernel).
constexpr int64_t kReleaseGilBytes = 256 * 1024;

int64_t bytes_of(const rotary::TensorView& v) {
  int64_t n = v.rank ? 1 : 0;
  for (int i = 0; i < v.rank; ++i) n *= v.shape[i];
  return n * static_cast<int64_t>(rotary::dtype_size(v.dtype));
}

}  // namespace

void bind_torch_entry(nb::module_& m) {
  m.def(
      "_torch_apply",
      [](nb::object spec, nb::handle cos, nb::handle sin, nb::handle q, nb::handle q_out, nb::handle k,
         nb::handle k_out, nb::handle positions, int64_t offset, const std::string& layout, const std::string& pairing,
         bool inverse, std::optional<int64_t> seq_len, int threads, bool cuda, uintptr_t stream) -> int {
        rotary::ApplyArgs a;
        constexpr const char* where = "rotary_apply";
        int copy = 0;
        bool unused = false;
        const bool in_place = q_out.is_none();
        bool need = false;
        a.q = torch_view(q, where, "x", cuda, need);
        // In place, a negative-bit view rotates correctly as raw memory (the rotation is linear: R(-m) = -R(m)).
        if (need && !in_place) copy |= kCopyQ;
        if (!in_place) a.q_out = torch_view(q_out, where, "out", cuda, unused);
        if (!k.is_none()) {
          need = false;
          a.k = torch_view(k, where, "k", cuda, need);
          if (need && !in_place) copy |= kCopyK;
          if (!in_place) a.k_out = torch_view(k_out, where, "k_out", cuda, unused);
        }
        if (!positions.is_none()) {
          need = false;
          a.positions = rotary::Positions::from_ids(torch_view(positions, where, "positions", cuda, need));
          if (need) copy |= kCopyPositions;
        } else {
          a.positions = rotary::Positions::contiguous(offset);
        }
        rotary::TensorView cv, sv;
        if (!cos.is_none()) {
          need = false;
          cv = torch_view(cos, where, "cos", cuda, need);
          if (need) copy |= kCopyCos;
          need = false;
          sv = torch_view(sin, where, "sin", cuda, need);
          if (need) copy |= kCopySin;
        }
        if (copy) return copy;
        a.layout = parse_layout(where, layout);
        if (!pairing.empty()) a.pairing = parse_pairing(where, pairing);
        a.direction = inverse ? rotary::Direction::kInverse : rotary::Direction::kForward;
        a.seq_len = seq_len;
        a.threads = threads;
        if (cuda) {
          a.backend = rotary::Backend::kCuda;
          a.stream = reinterpret_cast<void*>(stream);
        }
        rotary::Rope* rope = spec.is_none() ? nullptr : &nb::cast<const PySpec&>(spec).rope();
        // Empty calls are validated like the others (the engine writes nothing for them).
        const bool release = cuda || bytes_of(a.q) + (a.k.present() ? bytes_of(a.k) : 0) >= kReleaseGilBytes;
        auto run = [&] {
          if (rope) rope->apply(a);
          else rotary::apply_cos_sin(cv, sv, a);
        };
        if (release) {
          nb::gil_scoped_release r;
          run();
        } else {
          run();
        }
        return 0;
      },
      nb::arg("spec").none(), nb::arg("cos").none(), nb::arg("sin").none(), nb::arg("q"), nb::arg("q_out").none(),
      nb::arg("k").none(), nb::arg("k_out").none(), nb::arg("positions").none(), nb::arg("offset"),
      nb::arg("layout"), nb::arg("pairing"), nb::arg("inverse"), nb::arg("seq_len").none(), nb::arg("threads"),
      nb::arg("cuda"), nb::arg("stream"),
      "Private (rotary.torch's operators): rotates torch tensors q (and k) with a Spec's tables (spec) or caller "
      "cos/sin (spec None). q_out None = in place. pairing \"\" = the spec's. Returns 0 when done, else a bit mask "
      "of inputs to materialise first (1 q, 2 k, 4 positions, 8 cos, 16 sin: a broadcast axis or a negative-bit "
      "view) and does nothing.");

  m.def(
      "_torch_prologue",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle q_out, nb::handle positions, const PySpec& spec,
         const std::string& cache_layout, nb::handle k_cache, nb::handle v_cache, nb::handle slot_mapping,
         nb::handle cache_positions, nb::handle q_norm_weight, nb::handle k_norm_weight, double norm_eps,
         double norm_offset, const std::string& layout, int threads) -> int {
        rotary::PrologueArgs a;
        constexpr const char* where = "rotary_prologue";
        // Only calls of torch tensors with q, k, v and both caches, one dtype for the activations (q_out
        // too) and one for the caches; the generic path takes every other call and reports its errors in
        // its own words. Any tensor this entry cannot read as it is (a dtype the core takes only as raw
        // bits, a broadcast axis, a negative-bit view, a tensor that is not CPU or strided) sends the call
        // back to the generic path too, which converts it or reports it.
        if (!torch_imported()) return 1;  // no torch tensor can exist (names() would import torch)
        try {
          const auto type = reinterpret_cast<PyTypeObject*>(names().tensor_type);
          for (nb::handle t : {q, k, v, k_cache, v_cache})
            if (!PyObject_TypeCheck(t.ptr(), type)) return 1;
          if (!q_out.is_none() && !PyObject_TypeCheck(q_out.ptr(), type)) return 1;
          // A tensor whose gradient autograd would track: the generic path refuses it (the prologue is not
          // differentiable). Under no_grad / inference_mode nothing is read but the mode.
          if (grad_enabled())
            for (nb::handle t : {q, k, v, q_out, q_norm_weight, k_norm_weight, k_cache, v_cache})
              if (!t.is_none() && requires_grad(t)) return 1;
          bool need = false;
          auto view = [&](nb::handle t, const char* what) {
            return t.is_none() ? rotary::TensorView{} : torch_view(t, where, what, false, need);
          };
          a.q = view(q, "q");
          a.k = view(k, "k");
          a.v = view(v, "v");
          a.q_out = view(q_out, "q_out");
          a.k_cache = view(k_cache, "k_cache");
          a.v_cache = view(v_cache, "v_cache");
          a.slot_mapping = view(slot_mapping, "slot_mapping");
          a.cache_positions = view(cache_positions, "cache_positions");
          a.q_norm_weight = view(q_norm_weight, "q_norm_weight");
          a.k_norm_weight = view(k_norm_weight, "k_norm_weight");
          // positions: a non-negative int (the offset) or a torch tensor of ids of rank >= 1; anything else
          // (a 0-d tensor, which means an offset, a negative or huge int, a list) goes the generic way.
          if (PyLong_CheckExact(positions.ptr())) {
            const long long offset = PyLong_AsLongLong(positions.ptr());
            if (offset == -1 && PyErr_Occurred()) {
              PyErr_Clear();
              return 1;
            }
            if (offset < 0) return 1;
            a.positions = rotary::Positions::contiguous(offset);
          } else {
            if (!PyObject_TypeCheck(positions.ptr(), type)) return 1;
            const rotary::TensorView ids = torch_view(positions, where, "positions", false, need);
            // The core's id dtypes only (the generic path converts f16/bf16 ids to f64).
            const rotary::DType pd = ids.dtype;
            if (ids.rank == 0 || (pd != rotary::DType::kI64 && pd != rotary::DType::kI32 && pd != rotary::DType::kF32 &&
                                  pd != rotary::DType::kF64))
              return 1;
            a.positions = rotary::Positions::from_ids(ids);
          }
          if (need) return 1;
          const rotary::DType dt = a.q.dtype;
          if (a.k.dtype != dt || a.v.dtype != dt || (!q_out.is_none() && a.q_out.dtype != dt) ||
              a.v_cache.dtype != a.k_cache.dtype)
            return 1;
        } catch (const nb::builtin_exception&) {
          return 1;
        } catch (const nb::python_error&) {  // also torch's import or attribute errors in names()
          return 1;
        }
        a.sources = {{&spec.rope(), std::nullopt}};
        a.layout = parse_layout(where, layout);
        a.cache_layout = parse_cache_layout(where, cache_layout);
        a.norm_eps = norm_eps;
        a.norm_offset = norm_offset;
        a.threads = threads;
        const int64_t moved = bytes_of(a.q) + bytes_of(a.k) + (a.v.present() ? bytes_of(a.v) : 0);
        if (moved >= kReleaseGilBytes) {
          nb::gil_scoped_release r;
          rotary::prologue(a);
        } else {
          rotary::prologue(a);
        }
        return 0;
      },
      nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("q_out").none(), nb::arg("positions").none(),
      nb::arg("spec"), nb::arg("cache_layout"), nb::arg("k_cache").none(), nb::arg("v_cache").none(),
      nb::arg("slot_mapping").none(), nb::arg("cache_positions").none(), nb::arg("q_norm_weight").none(),
      nb::arg("k_norm_weight").none(), nb::arg("norm_eps"), nb::arg("norm_offset"), nb::arg("layout"),
      nb::arg("threads"),
      "Private (rotary.prologue's torch path): the prologue of torch CPU tensors read field by field (no DLPack) "
      "for one Spec and an int offset or a tensor of position ids. Returns 0 when done, 1 (having done nothing) "
      "when the call must go through the generic conversion.");

  m.def(
      "_torch_read_by_table",
      [](nb::handle t) -> bool {
        if (!torch_imported()) return false;
        rotary::TensorView v;
        return dlpack_view(t, v);
      },
      nb::arg("t"),
      "Private (tests): whether the torch entries read `t` through torch's DLPack exchange table (a plain CPU "
      "torch.Tensor or nn.Parameter of a dtype they take, on a torch that has the table) rather than attribute by "
      "attribute.");

  m.def(
      "_torch_table_reads",
      [](bool on) {
        const bool was = g_table_reads;
        g_table_reads = on;
        return was;
      },
      nb::arg("on"),
      "Private (tests): turns the exchange-table reads on or off (the attribute reads then take every tensor, as "
      "on a torch without the table); returns the previous setting.");

  m.def("_cuda_available", [] { return rotary::backend_available(rotary::Backend::kCuda); },
        "Private (rotary.torch): True when rotary's CUDA backend is built in and a device is present.");

  m.def(
      "_torch_cos_sin",
      [](const PySpec& spec, nb::handle positions, nb::handle cos_out, nb::handle sin_out,
         std::optional<int64_t> seq_len) -> int {
        constexpr const char* where = "rotary_cos_sin";
        bool need = false, unused = false;
        const rotary::TensorView pv = torch_view(positions, where, "positions", false, need);
        if (need) return kCopyPositions;
        const rotary::TensorView cv = torch_view(cos_out, where, "cos", false, unused);
        const rotary::TensorView sv = torch_view(sin_out, where, "sin", false, unused);
        rotary::Rope& rope = spec.rope();
        const bool release = bytes_of(cv) >= kReleaseGilBytes;
        auto run = [&] { rope.cos_sin(pv, seq_len, static_cast<float*>(cv.data), static_cast<float*>(sv.data)); };
        if (release) {
          nb::gil_scoped_release r;
          run();
        } else {
          run();
        }
        return 0;
      },
      nb::arg("spec"), nb::arg("positions"), nb::arg("cos"), nb::arg("sin"), nb::arg("seq_len").none(),
      "Private (rotary.torch's cos_sin operator): exact f32 rows [N, rotary_dim/2] for 1-D CPU positions into the "
      "contiguous f32 CPU tensors cos/sin. Returns 4 (and does nothing) if positions must be materialised first.");
}

}  // namespace rotary_py

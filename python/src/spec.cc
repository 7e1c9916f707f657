// Binds rotary.Spec (immutable, with a cached Rope), HF config parsing, presets and frequency queries.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"

namespace rotary_py {

PySpec::PySpec(const rotary::Spec& spec) : spec_(spec.normalized()), cache_(std::make_shared<Cache>()) {}

rotary::Rope& PySpec::rope() const {
  rotary::Rope* have = cache_->rope.load(std::memory_order_acquire);
  if (have != nullptr) return *have;
  auto made = std::make_unique<rotary::Rope>(spec_);  // cheap: no table rows until used
  if (cache_->rope.compare_exchange_strong(have, made.get(), std::memory_order_acq_rel)) return *made.release();
  return *have;  // another thread published first; ours is dropped
}

bool PySpec::has_rope() const { return cache_->rope.load(std::memory_order_acquire) != nullptr; }

namespace {

/// A new numpy float64 array owning a copy of `values`.
nb::ndarray<nb::numpy, double, nb::ndim<1>> to_numpy(const std::vector<double>& values) {
  double* data = new double[values.size() ? values.size() : 1];
  if (!values.empty()) std::memcpy(data, values.data(), values.size() * sizeof(double));
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<double*>(p); });
  return nb::ndarray<nb::numpy, double, nb::ndim<1>>(data, {values.size()}, owner);
}

/// Spec's keyword arguments, from the one serialisation of a Spec (rotary::spec_to_json): its top-level and
/// rope_parameters keys in one dict, with rope_theta as `base` and rope_interleave as `pairing`.
nb::dict spec_to_dict(const rotary::Spec& s) {
  nb::dict config = nb::cast<nb::dict>(nb::module_::import_("json").attr("loads")(rotary::spec_to_json(s)));
  nb::dict d;
  for (auto [key, value] : config) {
    if (nb::cast<std::string>(key) == "rope_parameters") {
      for (auto [k, v] : nb::cast<nb::dict>(value)) d[k] = v;
    } else {
      d[key] = value;
    }
  }
  d["base"] = d.attr("pop")("rope_theta");
  d.attr("pop")("rope_interleave");
  d["pairing"] = std::string(rotary::pairing_name(s.pairing));
  return d;
}

/// A str or os.PathLike as the file system's bytes (os.fsencode): a name that is not valid UTF-8 (a lone
/// surrogate from os.listdir) reaches the file system as the bytes it came from.
std::string fs_bytes(nb::handle path) {
  nb::object b = nb::module_::import_("os").attr("fsencode")(path);
  return std::string(PyBytes_AS_STRING(b.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(b.ptr())));
}

/// A Python config as config.json text and its source name: a dict, a transformers config (to_dict), a path
/// (str or os.PathLike, read by the core) or JSON text. `what` names the caller in the TypeError.
struct ConfigSource {
  std::string text;
  std::string path;  ///< non-empty: read this file instead
  std::string name;
};

ConfigSource python_config(nb::handle config, std::optional<std::string> name, const char* what) {
  nb::module_ json = nb::module_::import_("json");
  if (nb::isinstance<nb::str>(config)) {
    std::string text = fs_bytes(config);
    size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && text[first] == '{') return {text, "", name.value_or("config.json")};
    return {"", text, text};
  }
  if (nb::hasattr(config, "__fspath__")) {
    std::string path = fs_bytes(config);
    return {"", path, path};
  }
  nb::object dict;
  if (nb::isinstance<nb::dict>(config)) dict = nb::borrow(config);
  else if (nb::hasattr(config, "to_dict")) dict = config.attr("to_dict")();  // transformers PretrainedConfig
  else
    throw nb::type_error((std::string("[rotary_config] ") + what +
                          " expects a dict, a transformers config, a path or JSON text").c_str());
  // NaN and infinities go out as Python's NaN / Infinity tokens, which the core reads as strings: a RoPE field
  // holding one is refused naming it, others (Bamba's time_step_limit) are not RoPE's business.
  nb::object builtins = nb::module_::import_("builtins");
  std::string text = nb::cast<std::string>(json.attr("dumps")(dict, nb::arg("default") = builtins.attr("str")));
  return {text, "", name.value_or("config dict")};
}

rotary::Spec spec_from_python_config(nb::handle config, std::optional<std::string> name) {
  ConfigSource c = python_config(config, name, "Spec.from_hf_config");
  if (!c.path.empty()) return rotary::spec_from_hf_config_file(c.path);
  return rotary::spec_from_hf_config_json(c.text, c.name);
}

/// (nested, [(layer type, Spec or None)], layer_types) for rotary.LayerTypeSpecs.
nb::tuple layer_type_specs_from_python_config(nb::handle config, std::optional<std::string> name) {
  ConfigSource c = python_config(config, name, "LayerTypeSpecs.from_hf_config");
  const rotary::LayerTypeSpecs l = c.path.empty() ? rotary::layer_type_specs_from_hf_config_json(c.text, c.name)
                                                  : rotary::layer_type_specs_from_hf_config_file(c.path);
  nb::list by_type;
  for (const auto& e : l.by_type)
    by_type.append(nb::make_tuple(e.layer_type, e.spec ? nb::cast(PySpec(*e.spec)) : nb::none()));
  return nb::make_tuple(l.nested, by_type, nb::cast(l.layer_types));
}

/// Spec(head_dim, rotary_dim, base, *, pairing, rope_type, ...): Python's keyword names are the Spec fields'.
PySpec make_spec(int64_t head_dim, int64_t rotary_dim, double base, const std::string& pairing,
                 const std::string& rope_type, int64_t max_position_embeddings, std::optional<double> factor,
                 int64_t original_max_position_embeddings, double beta_fast, double beta_slow,
                 std::optional<double> mscale, std::optional<double> mscale_all_dim, bool truncate,
                 std::optional<double> attention_factor, std::optional<std::vector<double>> short_factor,
                 std::optional<std::vector<double>> long_factor, double low_freq_factor, double high_freq_factor,
                 std::optional<std::vector<int64_t>> mrope_section, bool mrope_interleaved,
                 double partial_rotary_factor, const std::string& name, std::optional<double> alpha,
                 std::optional<double> mixed_b) {
  rotary::Spec s;
  s.name = name;
  s.head_dim = head_dim;
  s.rotary_dim = rotary_dim;
  s.base = base;
  s.pairing = parse_pairing("rotary_spec", pairing);
  s.max_position_embeddings = max_position_embeddings;
  s.partial_rotary_factor = partial_rotary_factor;
  s.scaling.type = rotary::parse_rope_type(rope_type);
  s.scaling.factor = factor;
  s.scaling.original_max_position_embeddings = original_max_position_embeddings;
  s.scaling.beta_fast = beta_fast;
  s.scaling.beta_slow = beta_slow;
  s.scaling.mscale = mscale;
  s.scaling.mscale_all_dim = mscale_all_dim;
  s.scaling.truncate = truncate;
  s.scaling.attention_factor = attention_factor;
  if (short_factor) s.scaling.short_factor = *short_factor;
  if (long_factor) s.scaling.long_factor = *long_factor;
  s.scaling.low_freq_factor = low_freq_factor;
  s.scaling.high_freq_factor = high_freq_factor;
  if (mrope_section) s.mrope.section = *mrope_section;
  s.mrope.interleaved = mrope_interleaved;
  s.scaling.alpha = alpha;
  s.scaling.mixed_b = mixed_b;
  return PySpec(s);
}

/// Spec's fields in make_spec's order, each with what it takes and `native`: `v` converted by nanobind's caster
/// for the field's type and back to a plain Python object (int, float, str, list), or an invalid object when
/// the caster refuses `v`.
struct SpecField {
  const char* name;
  const char* takes;
  nb::object (*native)(nb::handle v);
};

template <class T>
nb::object Fits(nb::handle v) {
  T out;
  if (!nb::try_cast<T>(v, out)) return nb::object();
  return nb::cast(out);
}

/// bool fields: nanobind's caster, or a numpy bool (numpy.bool_), which it refuses.
nb::object FitsBool(nb::handle v) {
  nb::object b = Fits<bool>(v);
  if (b.is_valid()) return b;
  nb::handle t = v.type();
  if (!nb::hasattr(t, "__module__") || !nb::hasattr(t, "__name__")) return nb::object();
  const nb::object module = t.attr("__module__"), name = t.attr("__name__");
  if (!module.equal(nb::str("numpy")) || !(name.equal(nb::str("bool")) || name.equal(nb::str("bool_"))))
    return nb::object();
  return nb::bool_(PyObject_IsTrue(v.ptr()) == 1);
}

constexpr SpecField kSpecFields[] = {
    {"head_dim", "an int within int64", Fits<int64_t>},
    {"rotary_dim", "an int within int64", Fits<int64_t>},
    {"base", "a float (64-bit)", Fits<double>},
    {"pairing", "a str", Fits<std::string>},
    {"rope_type", "a str", Fits<std::string>},
    {"max_position_embeddings", "an int within int64", Fits<int64_t>},
    {"factor", "a float or None", Fits<std::optional<double>>},
    {"original_max_position_embeddings", "an int within int64", Fits<int64_t>},
    {"beta_fast", "a float (64-bit)", Fits<double>},
    {"beta_slow", "a float (64-bit)", Fits<double>},
    {"mscale", "a float or None", Fits<std::optional<double>>},
    {"mscale_all_dim", "a float or None", Fits<std::optional<double>>},
    {"truncate", "a bool", FitsBool},
    {"attention_factor", "a float or None", Fits<std::optional<double>>},
    {"short_factor", "a sequence of floats or None", Fits<std::optional<std::vector<double>>>},
    {"long_factor", "a sequence of floats or None", Fits<std::optional<std::vector<double>>>},
    {"low_freq_factor", "a float (64-bit)", Fits<double>},
    {"high_freq_factor", "a float (64-bit)", Fits<double>},
    {"mrope_section", "a sequence of ints or None", Fits<std::optional<std::vector<int64_t>>>},
    {"mrope_interleaved", "a bool", FitsBool},
    {"partial_rotary_factor", "a float (64-bit)", Fits<double>},
    {"name", "a str", Fits<std::string>},
    {"alpha", "a float or None", Fits<std::optional<double>>},
    {"mixed_b", "a float or None", Fits<std::optional<double>>},
};

[[noreturn]] void spec_argument_error(const std::string& what) { throw nb::type_error(("[rotary_spec] " + what).c_str()); }

/// Spec(...)'s second overload. nanobind tries every overload without implicit conversions before any with
/// them, so this one, which binds anything, is reached both by arguments of the wrong type or unknown names
/// (a TypeError naming the argument, instead of nanobind's list of signatures) and by arguments that need a
/// conversion (a numpy integer for head_dim, ints in short_factor): those are converted by the fields' own
/// casters and passed to the first overload again.
PySpec spec_from_any_arguments(nb::handle head_dim, const nb::args& args, const nb::kwargs& kwargs) {
  const auto fail = spec_argument_error;
  auto got = [](nb::handle v) {  // the type and the repr, cut by characters (a raising repr: the type alone)
    std::string r;
    try {
      nb::str text = nb::repr(v);
      if (nb::len(text) > 40) text = nb::str(text.attr("__getitem__")(nb::slice(0, 37)).attr("__add__")("..."));
      r = " " + nb::cast<std::string>(nb::str(text.attr("encode")("utf-8", "backslashreplace").attr("decode")("utf-8")));
    } catch (const std::exception&) {
    }
    return std::string(nb::type_name(v.type()).c_str()) + r;
  };
  if (args.size() > 2) fail("Spec takes at most 3 positional arguments (head_dim, rotary_dim, base), got " +
                            std::to_string(args.size() + 1));
  nb::dict native;
  auto add = [&](const SpecField& f, nb::handle v) {
    nb::object n = f.native(v);
    if (!n.is_valid()) fail(std::string(f.name) + " must be " + f.takes + ", got " + got(v));
    native[f.name] = n;
  };
  add(kSpecFields[0], head_dim);
  for (size_t i = 0; i < args.size(); ++i) {
    if (kwargs.contains(kSpecFields[i + 1].name)) fail(std::string(kSpecFields[i + 1].name) + " given twice");
    add(kSpecFields[i + 1], args[i]);
  }
  nb::list names;
  for (const SpecField& f : kSpecFields) names.append(f.name);
  for (auto [key, value] : kwargs) {
    const std::string k = nb::cast<std::string>(key);
    const auto* f = std::find_if(std::begin(kSpecFields), std::end(kSpecFields),
                                 [&](const SpecField& x) { return k == x.name; });
    if (f == std::end(kSpecFields)) {
      nb::object close = nb::module_::import_("difflib").attr("get_close_matches")(k, names, 1);
      fail("unknown field \"" + k + "\"" +
           (nb::len(close) ? " (did you mean \"" + nb::cast<std::string>(close[0]) + "\"?)" : std::string()));
    }
    add(*f, value);
  }
  // Plain values bind to the first overload; a second arrival here would mean they did not.
  thread_local bool again = false;
  if (again) fail("the arguments do not match Spec(head_dim, rotary_dim=0, base=10000.0, *, ...)");
  again = true;
  try {
    PySpec made = nb::cast<PySpec>(nb::type<PySpec>()(**native));
    again = false;
    return made;
  } catch (...) {
    again = false;
    throw;
  }
}

}  // namespace

void bind_spec(nb::module_& m) {
  nb::class_<PySpec> cls(m, "Spec",
      "An immutable RoPE specification: head/rotary dims, base, pairing, scaling, M-RoPE sections.\n\n"
      "Build one with Spec(head_dim, ...), Spec.from_hf_config(config) or Spec.preset(name).\n"
      "Each Spec owns a lazily built cos/sin table that rotary.apply reuses across calls.");

  // The parameters are make_spec's (their types) and the nb::arg list below (their names and defaults).
  cls.def(nb::new_(&make_spec),
          nb::arg("head_dim"), nb::arg("rotary_dim") = 0, nb::arg("base") = 10000.0, nb::kw_only(),
          nb::arg("pairing") = "half", nb::arg("rope_type") = "default", nb::arg("max_position_embeddings") = 0,
          nb::arg("factor") = nb::none(), nb::arg("original_max_position_embeddings") = 0,
          nb::arg("beta_fast") = 32.0, nb::arg("beta_slow") = 1.0, nb::arg("mscale") = nb::none(),
          nb::arg("mscale_all_dim") = nb::none(), nb::arg("truncate") = true,
          nb::arg("attention_factor") = nb::none(), nb::arg("short_factor") = nb::none(),
          nb::arg("long_factor") = nb::none(), nb::arg("low_freq_factor") = 1.0, nb::arg("high_freq_factor") = 4.0,
          nb::arg("mrope_section") = nb::none(), nb::arg("mrope_interleaved") = false,
          nb::arg("partial_rotary_factor") = 1.0, nb::arg("name") = "", nb::arg("alpha") = nb::none(),
          nb::arg("mixed_b") = nb::none(),
          "Builds and validates a Spec. rotary_dim 0 means head_dim; partial_rotary_factor does not set it (give rotary_dim, e.g. Spec(128, 64), for partial rotation; from_hf_config does), except for proportional. rope_type is an HF name "
          "(default, linear, dynamic, yarn, longrope, llama3, proportional) or vLLM's ntk; scaling keywords "
          "follow HF's and vLLM's rope_parameters (alpha: dynamic NTK-alpha; mixed_b: mixed NTK). Raises "
          "ValueError naming the first invalid field.");
  // Arguments that need a conversion, or are of the wrong type, or unknown keywords (spec_from_any_arguments).
  // Its parameters are typed Never in _rotary.pyi, so that type checkers hold calls to the first overload.
  cls.def(nb::new_(&spec_from_any_arguments), nb::arg("head_dim"), nb::arg("args"), nb::arg("kwargs"),
          "Not a second way to build a Spec: arguments that need a conversion (numpy scalars) are converted for "
          "the signature above; arguments of the wrong type, and unknown keywords, raise a TypeError naming them.");

  cls.def_static("from_hf_config",
                 [](nb::handle config, std::optional<std::string> name) {
                   return PySpec(spec_from_python_config(config, name));
                 },
                 nb::arg("config"), nb::arg("name") = nb::none(),
                 "Spec from a Hugging Face config: a dict, a transformers config object, a path to config.json, "
                 "or the JSON text. Reads v4 rope_scaling and v5 rope_parameters.");
  cls.def_static("preset", [](const std::string& name) { return PySpec(rotary::preset(name)); }, nb::arg("name"),
                 "A built-in model preset (see rotary.presets()). Raises ValueError listing valid names.");

  cls.def_prop_ro("name", [](const PySpec& s) { return s.spec().name; });
  cls.def_prop_ro("head_dim", [](const PySpec& s) { return s.spec().head_dim; });
  cls.def_prop_ro("rotary_dim", [](const PySpec& s) { return s.spec().effective_rotary_dim(); },
                  "Number of leading channels rotated (channels beyond pass through).");
  cls.def_prop_ro("base", [](const PySpec& s) { return s.spec().base; });
  cls.def_prop_ro("pairing", [](const PySpec& s) { return std::string(rotary::pairing_name(s.spec().pairing)); },
                  "\"half\" (GPT-NeoX/HF rotate_half) or \"interleaved\" (GPT-J/Meta).");
  cls.def_prop_ro("rope_type",
                  [](const PySpec& s) { return std::string(rotary::rope_type_name(s.spec().scaling.type)); });
  cls.def_prop_ro("max_position_embeddings", [](const PySpec& s) { return s.spec().max_position_embeddings; });
  cls.def_prop_ro("partial_rotary_factor", [](const PySpec& s) { return s.spec().partial_rotary_factor; });
  cls.def_prop_ro("factor", [](const PySpec& s) { return s.spec().scaling.factor; });
  cls.def_prop_ro("original_max_position_embeddings",
                  [](const PySpec& s) { return s.spec().scaling.original_max_position_embeddings; });
  cls.def_prop_ro("beta_fast", [](const PySpec& s) { return s.spec().scaling.beta_fast; });
  cls.def_prop_ro("beta_slow", [](const PySpec& s) { return s.spec().scaling.beta_slow; });
  cls.def_prop_ro("mscale", [](const PySpec& s) { return s.spec().scaling.mscale; });
  cls.def_prop_ro("mscale_all_dim", [](const PySpec& s) { return s.spec().scaling.mscale_all_dim; });
  cls.def_prop_ro("truncate", [](const PySpec& s) { return s.spec().scaling.truncate; });
  cls.def_prop_ro("short_factor", [](const PySpec& s) { return s.spec().scaling.short_factor; });
  cls.def_prop_ro("long_factor", [](const PySpec& s) { return s.spec().scaling.long_factor; });
  cls.def_prop_ro("low_freq_factor", [](const PySpec& s) { return s.spec().scaling.low_freq_factor; });
  cls.def_prop_ro("high_freq_factor", [](const PySpec& s) { return s.spec().scaling.high_freq_factor; });
  cls.def_prop_ro("alpha", [](const PySpec& s) { return s.spec().scaling.alpha; },
                  "dynamic: vLLM/Hunyuan NTK-alpha (a fixed base * alpha^(R/(R-2))); None = HF's dynamic NTK.");
  cls.def_prop_ro("mixed_b", [](const PySpec& s) { return s.spec().scaling.mixed_b; },
                  "ntk: vLLM's mixed NTK exponent; None = fixed NTK.");
  cls.def_prop_ro("mrope_section", [](const PySpec& s) { return s.spec().mrope.section; },
                  "M-RoPE (t, h, w) sections in frequency pairs; empty when off.");
  cls.def_prop_ro("mrope_interleaved", [](const PySpec& s) { return s.spec().mrope.interleaved; });
  cls.def_prop_ro("length_dependent", [](const PySpec& s) { return s.spec().length_dependent(); },
                  "True for dynamic (without alpha) and longrope, whose frequencies depend on the sequence length.");
  cls.def_prop_ro("attention_factor",
                  [](const PySpec& s) { return rotary::compute_frequencies(s.spec()).attention_factor; },
                  "The factor multiplying cos and sin (HF attention_scaling); 1.0 for most types.");
  cls.def_prop_ro("table_positions",
                  [](const PySpec& s) { return s.has_rope() ? s.rope().table().size() : int64_t(0); },
                  "Positions currently held by this spec's cached cos/sin table (0 before first use).");

  cls.def("inv_freq",
          [](const PySpec& s, std::optional<int64_t> seq_len) {
            return to_numpy(rotary::compute_frequencies(s.spec(), seq_len).inv_freq);
          },
          nb::arg("seq_len") = nb::none(),
          "theta_i for i < rotary_dim/2 as float64 numpy array, exactly as HF's rope init function computes them "
          "(but in double). seq_len matters only for dynamic and longrope.");
  cls.def("frequencies",
          [](const PySpec& s, std::optional<int64_t> seq_len) {
            rotary::Frequencies f = rotary::compute_frequencies(s.spec(), seq_len);
            return std::make_tuple(to_numpy(f.inv_freq), f.attention_factor);
          },
          nb::arg("seq_len") = nb::none(), "(inv_freq, attention_factor) for a sequence length.");
  cls.def("to_dict", [](const PySpec& s) { return spec_to_dict(s.spec()); },
          "All fields as a dict; Spec(**spec.to_dict()) rebuilds an equal Spec.");
  cls.def("replace",
          [](const PySpec& s, nb::kwargs changes) -> PySpec {
            nb::dict d = spec_to_dict(s.spec());
            for (auto [key, value] : changes) d[key] = value;
            // Dropping the sections drops their interleaved assignment (which needs sections).
            if (changes.contains("mrope_section") && !changes.contains("mrope_interleaved")) {
              nb::object sec = changes["mrope_section"];
              if (sec.is_none() || (nb::hasattr(sec, "__len__") && nb::len(sec) == 0)) d["mrope_interleaved"] = false;
            }
            return nb::cast<PySpec>(nb::type<PySpec>()(**d));
          },
          "A copy with some fields changed, e.g. spec.replace(pairing=\"interleaved\"). "
          "replace(mrope_section=None) also drops mrope_interleaved.");
  cls.def("__eq__", [](const PySpec& a, nb::handle b) -> nb::object {
    if (!nb::isinstance<PySpec>(b)) return nb::borrow(Py_NotImplemented);
    return nb::bool_(spec_to_dict(a.spec()).equal(spec_to_dict(nb::cast<const PySpec&>(b).spec())));
  });
  cls.def("__hash__", [](const PySpec& s) {
    return nb::hash(nb::str(nb::repr(spec_to_dict(s.spec()))));
  });
  cls.def("__repr__", [](const PySpec& s) {
    const rotary::Spec& p = s.spec();
    std::string r = "Spec(";
    if (!p.name.empty()) r += "name='" + p.name + "', ";
    r += "head_dim=" + std::to_string(p.head_dim) + ", rotary_dim=" + std::to_string(p.effective_rotary_dim()) +
         ", base=" + nb::cast<std::string>(nb::repr(nb::float_(p.base))) + ", rope_type='" +
         rotary::rope_type_name(p.scaling.type) + "', pairing='" + rotary::pairing_name(p.pairing) + "'";
    if (p.mrope.enabled()) r += ", mrope_section=" + nb::cast<std::string>(nb::repr(nb::cast(p.mrope.section)));
    return r + ")";
  });
  cls.def("__reduce__", [](const PySpec& s) {
    return nb::make_tuple(nb::module_::import_("rotary").attr("_spec_from_dict"), nb::make_tuple(spec_to_dict(s.spec())));
  });

  m.def("_layer_type_specs", &layer_type_specs_from_python_config, nb::arg("config"), nb::arg("name") = nb::none(),
        "Private: rotary::layer_type_specs_from_hf_config_json as (nested, [(layer_type, Spec | None)], layer_types); "
        "see rotary.LayerTypeSpecs.");
  m.def("presets", []() { return rotary::preset_names(); }, "Names of the built-in model presets.");
  m.def("preset_description", [](const std::string& name) { return rotary::preset_description(name); },
        nb::arg("name"), "One-line description of a preset.");
  m.def("preset_config_json", [](const std::string& name) { return rotary::preset_config_json(name); },
        nb::arg("name"), "The config.json text a preset is built from.");
  m.def("default_inv_freq",
        [](double base, int64_t rotary_dim) { return to_numpy(rotary::default_inv_freq(base, rotary_dim)); },
        nb::arg("base"), nb::arg("rotary_dim"), "base^(-2i/rotary_dim) in double, no scaling.");
}

}  // namespace rotary_py

// `rotary apply`: rotates a .npy tensor (f32/f16/f64, C or Fortran order) at the positions of another .npy with a model's RoPE.
#include <charconv>
#include <string>
#include <vector>

#include "cli.h"
#include "npy.h"
#include "rotary/apply.h"
#include "rotary/multimodal.h"

namespace rotary::cli {
namespace {

constexpr const char* kUsage =
    "rotary apply (--config FILE [--layer-type NAME] | --preset NAME) --input X.npy --positions P.npy --output Y.npy "
    "[--layout bshd|bhsd|thd] [--pairing half|interleaved] [--inverse] [--seq-len N] "
    "[--mrope-section T,H,W] [--mrope-interleaved] [--backend auto|cpu|reference|cuda] [--threads N]\n"
    "       rotary apply --vision qwen2vl|ggml-vision|pixtral [--base B] --input X.npy --positions P.npy "
    "--output Y.npy [--layout ...] [--pairing ...] [--inverse]   (2-D vision RoPE, P = (row, col) ids (2, ...))";

constexpr const char* kWhere = "rotary_apply";

[[noreturn]] void invalid(const std::string& message) { fail(Error::Kind::kInvalidArgument, kWhere, message); }

std::string npy_dtype_name(const NpyArray& a) {
  if (a.is_uint16) return "uint16";
  switch (a.dtype) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kF64: return "float64";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kBF16: return "bfloat16";
    case DType::kI8: return "int8";
    case DType::kF8E4M3: return "float8_e4m3fn";
    case DType::kF8E5M2: return "float8_e5m2";
  }
  return "unknown";
}

/// "16,24,24" -> {16, 24, 24}.
std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& s) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    long long v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0)
      throw UsageError("--" + flag + " must be comma-separated non-negative integers, got " + quote_value(s));
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

/// --layout, --inverse, --backend and --threads (both forms of the command).
ApplyArgs common_args(const Flags& flags) {
  ApplyArgs args;
  args.layout = parse_flag(parse_layout, flags.get("layout").value_or("bshd"), "--layout");
  args.direction = flags.has("inverse") ? Direction::kInverse : Direction::kForward;
  if (auto b = flags.get("backend")) args.backend = parse_flag(parse_backend, *b, "--backend");
  if (auto t = flags.get_int("threads")) {
    if (*t < 0 || *t > 4096) throw UsageError("--threads must be in [0, 4096], got " + std::to_string(*t));
    args.threads = static_cast<int>(*t);
  }
  return args;
}

/// The input tensor, its positions and the output array, as read (dtypes checked: the CLI rotates f32/f16
/// at integer positions); their shapes are the engine's to check.
struct Files {
  std::string input, positions, output;
  NpyArray x, p, y;
};

Files load_files(const Flags& flags) {
  Files f;
  f.input = flags.require("input");
  f.positions = flags.require("positions");
  f.output = flags.require("output");
  f.x = npy_load(f.input);
  if (f.x.is_uint16 || (f.x.dtype != DType::kF32 && f.x.dtype != DType::kF16 && f.x.dtype != DType::kF64))
    invalid("--input " + f.input + " must be float32, float16 or float64, got " + npy_dtype_name(f.x));
  f.p = npy_load(f.positions);
  if (f.p.is_uint16 || (f.p.dtype != DType::kI32 && f.p.dtype != DType::kI64))
    invalid("--positions " + f.positions + " must be int32 or int64, got " + npy_dtype_name(f.p));
  f.y.dtype = f.x.dtype;  // every element is written by the apply call
  f.y.shape = f.x.shape;
  f.y.data.resize(f.x.data.size());
  return f;
}

/// Runs `apply` (which validates every shape and value before writing) on the files' arrays and saves the
/// output. The engine names the tensors q and positions.ids; its messages get the file they are about.
template <class Apply>
int apply_and_save(Files& f, ApplyArgs& args, Apply apply) {
  args.q = f.x.view();
  args.q_out = f.y.view();
  args.positions = Positions::from_ids(f.p.view());
  try {
    apply(args);
  } catch (const Error& e) {
    const std::string msg = e.what(), where = std::string("[") + kWhere + "] ";
    if (msg.rfind(where, 0) != 0) throw;
    const std::string text = msg.substr(where.size());
    const bool about_positions = text.rfind("positions", 0) == 0;
    const bool about_input = text.rfind("q ", 0) == 0 || text.rfind("rotary_dim", 0) == 0;
    if (!about_positions && !about_input) throw;
    throw Error(e.kind(), where + (about_positions ? "--positions " + f.positions : "--input " + f.input) + ": " + text,
                e.cause());
  }
  npy_save(f.output, f.y);
  return 0;
}

/// --vision: 2-D vision RoPE (rotary::vision_frequencies) on the fly, positions (2, B, S), (2, S) or (2, T).
int run_vision(const Flags& flags) {
  for (const char* f : {"config", "preset", "mrope-section", "seq-len", "layer-type"})
    if (flags.has(f)) throw UsageError(std::string("--") + f + " cannot be combined with --vision");
  if (flags.has("mrope-interleaved")) throw UsageError("--mrope-interleaved cannot be combined with --vision");
  VisionSpec vs;
  try {
    vs.convention = parse_vision_convention(*flags.get("vision"), "--vision");
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (auto b = flags.get("base")) {
    double v = 0;
    auto [ptr, ec] = std::from_chars(b->data(), b->data() + b->size(), v);
    if (b->empty() || ec != std::errc() || ptr != b->data() + b->size())
      throw UsageError("--base must be a number, got " + quote_value(*b));
    vs.base = v;
  }
  ApplyArgs args = common_args(flags);
  if (auto p = flags.get("pairing")) vs.pairing = parse_flag(parse_pairing, *p, "--pairing");
  Files f = load_files(flags);
  vs.head_dim = f.x.shape.empty() ? 0 : f.x.shape.back();
  const AxisFrequencies af = vision_frequencies(vs);
  return apply_and_save(f, args, [&](const ApplyArgs& a) { apply_axes(af, a); });
}

const Options kOptions = {
    config_option(),
    layer_type_option(),
    preset_option(),
    {"input", "X.npy", "the tensor to rotate: float32, float16 or float64, C or Fortran order", "required"},
    {"positions", "P.npy", "int32/int64 position ids: (B, S) or (S,) [bshd/bhsd], (T,) [thd]; (3, ...) for M-RoPE, "
     "(2, ...) with --vision", "required"},
    {"output", "Y.npy", "where to write the rotated tensor (same dtype and shape as the input, C order)", "required"},
    {"layout", "bshd|bhsd|thd", "the input's axes: [B, S, H, D], [B, H, S, D] or [T, H, D]", "bshd"},
    {"pairing", "half|interleaved", "pairs (i, i+R/2) or (2i, 2i+1)", "the spec's (half for HF configs)"},
    {"inverse", nullptr, "rotate by -angle (the backward pass)", "off"},
    {"seq-len", "N", "the sequence length that length-dependent scaling sees", "max(P) + 1, as HF's forward"},
    {"mrope-section", "T,H,W", "M-RoPE sections (pairs per axis, summing to R/2)", "the config's, else off"},
    {"mrope-interleaved", nullptr, "Qwen3-VL's interleaved M-RoPE axis assignment", "off"},
    {"backend", "auto|cpu|reference|cuda", "which kernels run", "auto"},
    {"threads", "N", "threads for the call (0 = automatic, up to 4096)", "0"},
    {"vision", "qwen2vl|ggml-vision|pixtral", "2-D vision RoPE of this convention instead of a config/preset",
     "off"},
    {"base", "B", "the vision RoPE base (only with --vision)", "the convention's"},
};

int run_apply(const std::vector<std::string>& argv) {
  Flags flags(argv, kOptions);
  if (!flags.positional().empty()) throw UsageError("unexpected argument " + quote_value(flags.positional()[0]));
  if (flags.has("vision")) return run_vision(flags);
  if (flags.has("base")) throw UsageError("--base is only used with --vision (a config or preset sets rope_theta)");
  Spec spec = spec_from_flags(flags);
  ApplyArgs args = common_args(flags);
  if (auto p = flags.get("pairing")) args.pairing = parse_flag(parse_pairing, *p, "--pairing");  // else the spec's
  // Positions are < 2^31; without --seq-len, length-dependent scaling sees max(P) + 1, as HF's forward does.
  if (auto n = flags.get_count("seq-len", 1LL << 31, "2^31")) args.seq_len = *n;

  // M-RoPE (Qwen2-VL / Qwen3-VL): sections over (t, h, w); positions then have shape [3,B,S] or [3,T].
  if (auto sec = flags.get("mrope-section")) spec.mrope.section = parse_int_list("mrope-section", *sec);
  if (flags.has("mrope-interleaved")) {
    if (!spec.mrope.enabled())
      throw UsageError("--mrope-interleaved needs --mrope-section (or a config with mrope_section)");
    spec.mrope.interleaved = true;
  }

  Files f = load_files(flags);
  Rope rope(spec);  // kAuto: the table where it pays off, rows on the fly otherwise (the same values)
  return apply_and_save(f, args, [&](const ApplyArgs& a) { rope.apply(a); });
}

}  // namespace

ROTARY_CLI_COMMAND("apply", kUsage, "rotate a .npy tensor (f32/f16/f64) at the positions of another .npy", run_apply,
                   &kOptions);

}  // namespace rotary::cli

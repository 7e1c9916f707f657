// `rotary apply`: rotates a .npy tensor (f32/f16) at the positions of another .npy with a model's RoPE.
#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "cli.h"
#include "npy.h"
#include "rotary/apply.h"
#include "rotary/multimodal.h"

namespace rotary::cli {
namespace {

/// An output array with x's dtype and shape (zero-filled; every element is written by the apply call).
NpyArray output_like(const NpyArray& x) {
  NpyArray y;
  y.dtype = x.dtype;
  y.shape = x.shape;
  y.data.resize(x.data.size());
  return y;
}

constexpr const char* kUsage =
    "rotary apply (--config FILE | --preset NAME) --input X.npy --positions P.npy --output Y.npy "
    "[--layout bshd|bhsd|thd] [--pairing half|interleaved] [--inverse] [--seq-len N] "
    "[--mrope-section T,H,W] [--mrope-interleaved] [--backend auto|cpu|reference] [--threads N]\n"
    "       rotary apply --vision qwen2vl|ggml-vision|pixtral [--base B] --input X.npy --positions P.npy "
    "--output Y.npy [--layout ...] [--pairing ...] [--inverse]   (2-D vision RoPE, P = (row, col) ids (2, ...))";

constexpr const char* kWhere = "rotary_apply";

[[noreturn]] void invalid(const std::string& message) { fail(Error::Kind::kInvalidArgument, kWhere, message); }

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

std::string npy_dtype_name(const NpyArray& a) {
  if (a.is_uint16) return "uint16";
  switch (a.dtype) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kF64: return "float64";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kBF16: return "bfloat16";
  }
  return "unknown";
}

Layout parse_layout(const std::string& s) {
  if (s == "bshd") return Layout::kBSHD;
  if (s == "bhsd") return Layout::kBHSD;
  if (s == "thd") return Layout::kTHD;
  throw UsageError("--layout must be bshd, bhsd or thd, got \"" + s + "\"");
}

Pairing parse_pairing(const std::string& s) {
  if (s == "half") return Pairing::kHalfSplit;
  if (s == "interleaved") return Pairing::kInterleaved;
  throw UsageError("--pairing must be half or interleaved, got \"" + s + "\"");
}

Backend parse_backend(const std::string& s) {
  if (s == "auto") return Backend::kAuto;
  if (s == "cpu") return Backend::kCpu;
  if (s == "reference") return Backend::kReference;
  if (s == "cuda") return Backend::kCuda;
  throw UsageError("--backend must be auto, cpu, reference or cuda, got \"" + s + "\"");
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
      throw UsageError("--" + flag + " must be comma-separated non-negative integers, got \"" + s + "\"");
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

/// --vision: 2-D vision RoPE (rotary::vision_frequencies) on the fly, positions (2, B, S), (2, S) or (2, T).
int run_vision(const Flags& flags) {
  for (const char* f : {"config", "preset", "mrope-section", "seq-len"})
    if (flags.has(f)) throw UsageError(std::string("--") + f + " cannot be combined with --vision");
  if (flags.has("mrope-interleaved")) throw UsageError("--mrope-interleaved cannot be combined with --vision");
  VisionSpec vs;
  vs.convention = parse_vision_convention(*flags.get("vision"), "--vision");
  if (auto b = flags.get("base")) {
    double v = 0;
    auto [ptr, ec] = std::from_chars(b->data(), b->data() + b->size(), v);
    if (b->empty() || ec != std::errc() || ptr != b->data() + b->size())
      throw UsageError("--base must be a number, got \"" + *b + "\"");
    vs.base = v;
  }
  ApplyArgs args;
  args.layout = parse_layout(flags.get("layout").value_or("bshd"));
  if (auto p = flags.get("pairing")) vs.pairing = parse_pairing(*p);
  args.direction = flags.has("inverse") ? Direction::kInverse : Direction::kForward;
  if (auto b = flags.get("backend")) args.backend = parse_backend(*b);
  if (auto t = flags.get_int("threads")) {
    if (*t < 0 || *t > 4096) throw UsageError("--threads must be in [0, 4096], got " + std::to_string(*t));
    args.threads = static_cast<int>(*t);
  }
  const std::string input_path = flags.require("input");
  const std::string positions_path = flags.require("positions");
  const std::string output_path = flags.require("output");
  NpyArray x = npy_load(input_path);
  if (x.is_uint16 || (x.dtype != DType::kF32 && x.dtype != DType::kF16))
    invalid("--input " + input_path + " must be float32 or float16, got " + npy_dtype_name(x));
  const size_t want_rank = args.layout == Layout::kTHD ? 3 : 4;
  if (x.shape.size() != want_rank)
    invalid("--input " + input_path + " has shape " + shape_str(x.shape) + " but --layout " +
            layout_name(args.layout) + " needs rank " + std::to_string(want_rank));
  vs.head_dim = x.shape.back();
  const AxisFrequencies af = vision_frequencies(vs);
  NpyArray p = npy_load(positions_path);
  if (p.is_uint16 || (p.dtype != DType::kI32 && p.dtype != DType::kI64))
    invalid("--positions " + positions_path + " must be int32 or int64, got " + npy_dtype_name(p));
  if (p.shape.empty() || p.shape[0] != 2)
    invalid("--positions " + positions_path + " has shape " + shape_str(p.shape) +
            "; --vision needs (row, col) ids of shape (2, B, S), (2, S) or (2, T)");
  NpyArray y = output_like(x);
  args.q = x.view();
  args.q_out = y.view();
  args.positions = Positions::from_ids(p.view());
  apply_axes(af, args);  // validates shapes and values before writing
  npy_save(output_path, y);
  return 0;
}

int run_apply(const std::vector<std::string>& argv) {
  Flags flags(argv,
              {"config", "preset", "input", "positions", "output", "layout", "pairing", "seq-len", "mrope-section",
               "backend", "threads", "vision", "base"},
              {"inverse", "mrope-interleaved"});
  if (!flags.positional().empty()) throw UsageError("unexpected argument \"" + flags.positional()[0] + "\"");
  if (flags.has("vision")) return run_vision(flags);
  if (flags.has("base")) throw UsageError("--base is only used with --vision (a config or preset sets rope_theta)");
  Spec spec = spec_from_flags(flags);
  const std::string input_path = flags.require("input");
  const std::string positions_path = flags.require("positions");
  const std::string output_path = flags.require("output");

  ApplyArgs args;
  args.layout = parse_layout(flags.get("layout").value_or("bshd"));
  if (auto p = flags.get("pairing")) args.pairing = parse_pairing(*p);  // else the spec's pairing
  args.direction = flags.has("inverse") ? Direction::kInverse : Direction::kForward;
  if (auto n = flags.get_int("seq-len")) {
    if (*n <= 0) throw UsageError("--seq-len must be > 0, got " + std::to_string(*n));
    args.seq_len = *n;
  }  // else length-dependent scaling sees max(P) + 1, as HF's forward does
  if (auto b = flags.get("backend")) args.backend = parse_backend(*b);
  if (auto t = flags.get_int("threads")) {
    if (*t < 0 || *t > 4096) throw UsageError("--threads must be in [0, 4096], got " + std::to_string(*t));
    args.threads = static_cast<int>(*t);
  }

  // M-RoPE (Qwen2-VL / Qwen3-VL): sections over (t, h, w); positions then have shape [3,B,S] or [3,T].
  if (auto sec = flags.get("mrope-section")) spec.mrope.section = parse_int_list("mrope-section", *sec);
  if (flags.has("mrope-interleaved")) {
    if (!spec.mrope.enabled())
      throw UsageError("--mrope-interleaved needs --mrope-section (or a config with mrope_section)");
    spec.mrope.interleaved = true;
  }

  // Input tensor.
  NpyArray x = npy_load(input_path);
  if (x.is_uint16 || (x.dtype != DType::kF32 && x.dtype != DType::kF16))
    invalid("--input " + input_path + " must be float32 or float16, got " + npy_dtype_name(x));
  const size_t want_rank = args.layout == Layout::kTHD ? 3 : 4;
  if (x.shape.size() != want_rank)
    invalid("--input " + input_path + " has shape " + shape_str(x.shape) + " but --layout " +
            layout_name(args.layout) + " needs rank " + std::to_string(want_rank) +
            (args.layout == Layout::kBSHD   ? " [B, S, H, D]"
             : args.layout == Layout::kBHSD ? " [B, H, S, D]"
                                            : " [T, H, D]"));
  const int64_t B = args.layout == Layout::kTHD ? 1 : x.shape[0];
  const int64_t S = args.layout == Layout::kBSHD ? x.shape[1] : args.layout == Layout::kBHSD ? x.shape[2] : x.shape[0];

  // Positions.
  NpyArray p = npy_load(positions_path);
  if (p.is_uint16 || (p.dtype != DType::kI32 && p.dtype != DType::kI64))
    invalid("--positions " + positions_path + " must be int32 or int64, got " + npy_dtype_name(p));
  const std::vector<int64_t> token_shape = args.layout == Layout::kTHD ? std::vector<int64_t>{S}
                                                                       : std::vector<int64_t>{B, S};
  auto matches = [&](const std::vector<int64_t>& shape, size_t skip) {
    // shape[skip:] == token_shape, or == [S] (broadcast over batch, bshd/bhsd only)
    std::vector<int64_t> tail(shape.begin() + static_cast<std::ptrdiff_t>(std::min(skip, shape.size())), shape.end());
    return tail == token_shape || (args.layout != Layout::kTHD && tail == std::vector<int64_t>{S});
  };
  if (spec.mrope.enabled()) {
    if (p.shape.empty() || p.shape[0] != 3 || !matches(p.shape, 1))
      invalid("--positions " + positions_path + " has shape " + shape_str(p.shape) + "; M-RoPE with input shape " +
              shape_str(x.shape) + " needs " +
              (args.layout == Layout::kTHD ? "(3, " + std::to_string(S) + ")"
                                           : "(3, " + std::to_string(B) + ", " + std::to_string(S) + ")"));
  } else if (!matches(p.shape, 0)) {
    invalid("--positions " + positions_path + " has shape " + shape_str(p.shape) + "; input shape " +
            shape_str(x.shape) + " with --layout " + layout_name(args.layout) + " needs " +
            (args.layout == Layout::kTHD ? "(" + std::to_string(S) + ",)"
                                         : "(" + std::to_string(B) + ", " + std::to_string(S) + ") or (" +
                                               std::to_string(S) + ",)"));
  }

  NpyArray y = output_like(x);
  args.q = x.view();
  args.q_out = y.view();
  args.positions = Positions::from_ids(p.view());

  // A table only pays off when there are more tokens than table rows to build; otherwise (a few
  // tokens at large positions) cos/sin are computed per token. Both give the same values.
  int64_t max_pos = -1;
  for (int64_t i = 0; i < p.numel(); ++i)
    max_pos = std::max<int64_t>(max_pos, p.dtype == DType::kI32 ? p.as<int32_t>()[i] : p.as<int64_t>()[i]);
  RopeOptions options;
  // Overflow-safe form of B * S > max_pos + 1 (a hostile positions file may hold INT64_MAX).
  int64_t tokens = 0;
  const bool many_tokens = __builtin_mul_overflow(B, S, &tokens) || tokens - 1 > max_pos;
  options.mode = many_tokens ? CosSinMode::kAuto : CosSinMode::kOnTheFly;
  Rope rope(spec, options);
  rope.apply(args);  // validates everything before writing
  npy_save(output_path, y);
  return 0;
}

}  // namespace

ROTARY_CLI_COMMAND("apply", kUsage, "rotate a .npy tensor (f32/f16) at the positions of another .npy", run_apply);

}  // namespace rotary::cli

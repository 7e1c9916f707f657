// `rotary export`: writes rotary's exact inv_freq or cos/sin tables in an engine's layout (.npy or .safetensors).
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli.h"
#include "npy.h"
#include "rotary/parity.h"

namespace rotary::cli {
namespace {

constexpr const char* kUsage =
    "rotary export (--config FILE [--layer-type NAME] | --preset NAME) --layout hf|vllm|flashinfer|te|ggml|onnx|raw "
    "(--out FILE.safetensors|FILE.npy | --cos A.npy --sin B.npy) [--what cos-sin|inv-freq] [--dtype f32|f16|bf16] "
    "[--max-pos N]";

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::kF32;
  if (s == "f16" || s == "float16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "f64" || s == "float64") return DType::kF64;
  throw UsageError("--dtype must be f32, f16 or bf16, got " + quote_value(s));
}

std::string ext_of(const std::string& path) { return std::filesystem::path(path).extension().string(); }

const Options kOptions = {
    config_option(),
    layer_type_option(),
    preset_option(),
    {"layout", "hf|vllm|flashinfer|te|ggml|onnx|raw", "the engine layout to write (docs/parity.md)", "required"},
    {"out", "FILE", "one .safetensors or .npy file for every tensor (ggml: .safetensors)", "none"},
    {"cos", "A.npy", "write cos to its own .npy (with --sin) instead of --out", "none"},
    {"sin", "B.npy", "write sin to its own .npy (with --cos)", "none"},
    {"what", "cos-sin|inv-freq", "the table to write", "cos-sin (ggml: inv-freq, its parameters)"},
    {"dtype", "f32|f16|bf16", "the element type of cos/sin (rounded once from exact angles)", "f32"},
    {"max-pos", "N", "rows [0, N) of the table", "max_position_embeddings (4096 if unknown)"},
};

int run(const std::vector<std::string>& args) {
  Flags flags(args, kOptions);
  if (!flags.positional().empty()) throw UsageError("unexpected argument " + quote_value(flags.positional()[0]));
  const Spec spec = spec_from_flags(flags);
  ExportOptions o;
  try {
    o.layout = parse_engine_layout(flags.require("layout"), "rotary_export");
  } catch (const Error& e) {
    throw UsageError(e.what());  // a bad option value
  }
  o.what = o.layout == EngineLayout::kGgml ? TableKind::kInvFreq : TableKind::kCosSin;
  if (auto w = flags.get("what")) {
    if (*w == "cos-sin") o.what = TableKind::kCosSin;
    else if (*w == "inv-freq") o.what = TableKind::kInvFreq;
    else throw UsageError("--what must be cos-sin or inv-freq, got " + quote_value(*w));
  }
  if (auto d = flags.get("dtype")) o.dtype = parse_dtype(*d);
  if (auto n = flags.get_count("max-pos", 1LL << 22, "4194304")) o.positions = *n;  // rotary::export_tables' limit
  const bool split = flags.has("cos") || flags.has("sin");
  if (split == flags.has("out")) throw UsageError("give either --out FILE or --cos A.npy --sin B.npy");
  // Every check on the flags happens before anything is computed or written.
  std::string out;
  if (split) {
    if (!flags.has("cos") || !flags.has("sin")) throw UsageError("--cos and --sin go together");
    if (ext_of(*flags.get("cos")) != ".npy" || ext_of(*flags.get("sin")) != ".npy")
      throw UsageError("--cos and --sin name .npy files");
    std::error_code ec1, ec2;  // one file named twice (also through ./, .. or a link): sin would replace cos
    const auto c = std::filesystem::weakly_canonical(*flags.get("cos"), ec1);
    const auto s = std::filesystem::weakly_canonical(*flags.get("sin"), ec2);
    if (ec1 ? *flags.get("cos") == *flags.get("sin") : (!ec2 && c == s))
      throw UsageError("--cos and --sin name the same file " + quote_value(*flags.get("cos")) + ": give two files");
  } else {
    out = *flags.get("out");
    if (ext_of(out) != ".npy" && ext_of(out) != ".safetensors")
      throw UsageError("--out must end in .safetensors or .npy, got " + quote_value(out));
    if (o.layout == EngineLayout::kGgml && ext_of(out) != ".safetensors")
      throw UsageError("the ggml layout is ggml_rope_ext's parameters (metadata) and freq_factors: --out must be .safetensors");
  }
  const TensorFile t = export_tables(spec, o);
  if (split) {
    const NpyArray* c = t.tensors.size() == 2 ? &t.tensors[0].second : nullptr;
    if (!c) throw UsageError(std::string("--cos/--sin: the ") + engine_layout_name(o.layout) + " " +
                             (o.what == TableKind::kInvFreq ? "inv_freq" : "table") + " is one tensor: use --out");
    const std::string cb = npy_serialize(t.tensors[0].second), sb = npy_serialize(t.tensors[1].second);
    write_file_atomically(*flags.get("cos"), cb);
    try {
      write_file_atomically(*flags.get("sin"), sb);
    } catch (...) {  // nothing half-written: take the cos file back
      std::filesystem::remove(*flags.get("cos"));
      throw;
    }
    std::printf("wrote %s (%s) and %s (%s)\n", flags.get("cos")->c_str(), t.tensors[0].first.c_str(), flags.get("sin")->c_str(),
                t.tensors[1].first.c_str());
  } else if (ext_of(out) == ".npy") {
    if (t.tensors.size() != 1)
      throw UsageError(std::string("the ") + engine_layout_name(o.layout) + " layout has " + std::to_string(t.tensors.size()) +
                       " tensors" + (t.metadata.count("mode") ? " and parameters" : "") +
                       "; .npy holds one: use .safetensors or --cos/--sin");
    write_file_atomically(out, npy_serialize(t.tensors[0].second));
    std::printf("wrote %s (%s)\n", out.c_str(), t.tensors[0].first.c_str());
  } else {
    write_file_atomically(out, safetensors_serialize(t));
    std::string names;
    for (const auto& [n, a] : t.tensors) names += (names.empty() ? "" : ", ") + n;
    std::printf("wrote %s (%s)\n", out.c_str(), names.c_str());
  }
  if (engine_layout_name(o.layout) == std::string("te") && t.metadata.count("rotary.attention_factor") &&
      t.metadata.at("rotary.attention_factor") != "1")
    std::fprintf(stderr, "note: TE freqs hold angles only; apply the attention factor %s to cos/sin yourself\n",
                 t.metadata.at("rotary.attention_factor").c_str());
  return 0;
}

}  // namespace

ROTARY_CLI_COMMAND("export", kUsage, "write rotary's exact inv_freq or cos/sin in an engine's layout (.npy, .safetensors)", run,
                   &kOptions);

}  // namespace rotary::cli

// `rotary check`: audits an engine's inv_freq, cos/sin table or rotated q/k against a config (exit 0 agree, 1 disagree).
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli.h"
#include "rotary/parity.h"

namespace rotary::cli {
namespace {

constexpr const char* kUsage =
    "rotary check (--config FILE [--layer-type NAME] | --preset NAME) (--inv-freq F | --cos-sin F | --cos F --sin F | "
    "--rotated Y --input X --positions P) --layout hf|vllm|flashinfer|te|ggml|onnx|raw [--max-pos N] [--json]";

/// Reads a .npy or .safetensors file; .pt needs torch, so it is left to the Python API.
TensorFile read(const std::string& path, const std::string& npy_name) {
  if (std::filesystem::path(path).extension() == ".pt")
    throw UsageError(path + ": .pt files need torch; load them with rotary.check(...) in Python (it reads .pt with "
                     "torch.load(weights_only=True)), or save the tensors as .safetensors or .npy");
  return load_tensor_file(path, npy_name);
}

/// The one tensor of `path` for `role` (its only tensor, or one named like any of `names`), renamed to `role`.
void add_role(TensorFile& into, const std::string& path, const std::string& role, std::initializer_list<const char*> names) {
  TensorFile f = read(path, role);
  const HostArray* a = f.tensors.size() == 1 ? &f.tensors[0].second : nullptr;
  for (const char* n : names)
    if (!a) a = f.find_like(n);
  if (!a) throw UsageError(path + " holds " + std::to_string(f.tensors.size()) + " tensors and none is named " + role);
  into.tensors.emplace_back(role, *a);
}

const Options kOptions = {
    config_option(),
    layer_type_option(),
    preset_option(),
    {"layout", "hf|vllm|flashinfer|te|ggml|onnx|raw", "the engine layout of the files (docs/parity.md)", "required"},
    {"inv-freq", "F", "audit an inv_freq (ggml: its parameters) from a .npy/.safetensors file", "none"},
    {"cos-sin", "F", "audit a cos/sin table (te: angles) from a .npy/.safetensors file", "none"},
    {"cos", "F", "audit a cos table given in its own file (with --sin)", "none"},
    {"sin", "F", "the sin table that goes with --cos", "none"},
    {"rotated", "Y", "audit q/k an engine rotated (with --input and --positions)", "none"},
    {"input", "X", "the q/k before rotation (with --rotated)", "none"},
    {"positions", "P", "the positions of --rotated's tokens", "none"},
    {"max-pos", "N", "the sequence length the engine serves (dynamic/longrope) and the positions examined",
     "the table's rows, max(positions)+1, or max_position_embeddings"},
    {"json", nullptr, "print the result as JSON (fields: docs/cli.md)", "off"},
};

int run_check(const std::vector<std::string>& args) {
  Flags flags(args, kOptions);
  if (!flags.positional().empty()) throw UsageError("unexpected argument " + quote_value(flags.positional()[0]));
  const Spec spec = spec_from_flags(flags);
  CheckInput in;
  try {
    in.layout = parse_engine_layout(flags.require("layout"));
  } catch (const Error& e) {
    throw UsageError(e.what());  // a bad option value
  }
  const int modes = (flags.has("inv-freq") ? 1 : 0) + (flags.has("cos-sin") ? 1 : 0) +
                    (flags.has("cos") || flags.has("sin") ? 1 : 0) + (flags.has("rotated") || flags.has("input") ? 1 : 0);
  if (modes != 1)
    throw UsageError("give exactly one of --inv-freq F, --cos-sin F, --cos F --sin F, --rotated Y --input X --positions P");
  if (flags.has("inv-freq")) {
    in.kind = TableKind::kInvFreq;
    in.tensors = read(*flags.get("inv-freq"), "inv_freq");
  } else if (flags.has("cos-sin")) {
    in.kind = TableKind::kCosSin;
    in.tensors = read(*flags.get("cos-sin"), "table");
  } else if (flags.has("cos")) {
    in.kind = TableKind::kCosSin;
    add_role(in.tensors, flags.require("cos"), "cos", {"cos", "cos_cache"});
    add_role(in.tensors, flags.require("sin"), "sin", {"sin", "sin_cache"});
  } else {
    in.kind = TableKind::kRotated;
    add_role(in.tensors, flags.require("rotated"), "rotated", {"rotated"});
    add_role(in.tensors, flags.require("input"), "input", {"input"});
    add_role(in.tensors, flags.require("positions"), "positions", {"positions", "position_ids"});
  }
  if (auto n = flags.get_count("max-pos", 1LL << 31, "2^31")) in.max_pos = *n;  // a sequence length
  const CheckResult r = check_parity(spec, in);
  const std::string out = flags.has("json") ? check_result_json(r) : check_result_text(r);
  std::fputs(out.c_str(), stdout);
  return r.agree ? kExitOk : kExitFailure;
}

/// Exit 1 means "disagrees" here, so an input that cannot be checked (a malformed file, a wrong shape or dtype
/// for the layout: rotary's own errors) exits 2 with its message, as a usage error does (docs/parity.md).
int run(const std::vector<std::string>& args) {
  try {
    return run_check(args);
  } catch (const rotary::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitUsage;
  }
}

}  // namespace

ROTARY_CLI_COMMAND("check", kUsage,
                   "audit an engine's RoPE table (inv_freq, cos/sin, rotated q/k) against a config; diagnoses known mistakes",
                   run, &kOptions, "exit status: 0 the data agrees with the config, 1 it disagrees, 2 usage or input error");

}  // namespace rotary::cli

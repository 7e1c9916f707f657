// `rotary check` / `rotary export` at the CLI: exit 0 agree / 1 disagree with --json fields; hostile inputs exit 2, named, nothing written.
#include <gtest/gtest.h>

#include <cstdio>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "npy.h"
#include "rotary/safetensors.h"
#include "testing/errors_doc.h"
#include "testing/shared.h"

namespace rotary {
namespace {

namespace fs = std::filesystem;

class CheckCli : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_ = testing::cli_path();
    if (cli_.empty() || !fs::exists(cli_)) GTEST_SKIP() << "rotary CLI not built";
    // The pid at a fixed width: messages quoting the path then have one length (docs/errors.md masks the digits).
    char pid[16];
    std::snprintf(pid, sizeof pid, "%07d", static_cast<int>(::getpid()) % 10000000);
    dir_ = fs::temp_directory_path() / ("rotary_check_cli_" + std::string(pid) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  int run(const std::string& args, std::string* out) const { return testing::run_command("'" + cli_ + "' " + args, out, true); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string cli_;
  fs::path dir_;
};

TEST_F(CheckCli, ExitCodesAndJsonFields) {
  std::string out;
  ASSERT_EQ(run("export --preset qwen2.5-7b-yarn --layout vllm --max-pos 2048 --out '" + path("t.safetensors") + "'", &out), 0) << out;
  ASSERT_EQ(run("check --preset qwen2.5-7b-yarn --layout vllm --cos-sin '" + path("t.safetensors") + "' --json", &out), 0) << out;
  auto j = nlohmann::json::parse(out);
  for (const char* k : {"verdict", "max_rel_err_inv_freq", "attention_factor_expected", "attention_factor_found", "diagnoses",
                        "first_pos_err_1e-3", "first_pos_err_1e-2", "bands", "precision", "precision_f32_angles"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["verdict"], "agree");
  // Every key at any depth (except the spec, described with the spec layout) is described in docs/cli.md.
  const std::string doc = testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/cli.md");
  std::function<void(const nlohmann::json&)> described = [&](const nlohmann::json& v) {
    if (v.is_array()) for (const auto& e : v) described(e);
    if (!v.is_object()) return;
    for (const auto& [key, value] : v.items()) {
      EXPECT_NE(doc.find("| `" + key + "` |"), std::string::npos) << key << " is not described in docs/cli.md";
      if (key != "spec") described(value);
    }
  };
  described(j);
  // The README's example: a YaRN table without the attention factor.
  write("noaf.json", R"({"hidden_size": 3584, "num_attention_heads": 28, "max_position_embeddings": 32768,
    "rope_theta": 1000000.0, "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
    "attention_factor": 1.0}})");
  ASSERT_EQ(run("export --config '" + path("noaf.json") + "' --layout vllm --max-pos 2048 --out '" + path("noaf.npy") + "'", &out), 0) << out;
  ASSERT_EQ(run("check --preset qwen2.5-7b-yarn --layout vllm --cos-sin '" + path("noaf.npy") + "' --json", &out), 1) << out;
  j = nlohmann::json::parse(out);
  EXPECT_EQ(j["verdict"], "disagree");
  ASSERT_EQ(j["diagnoses"].size(), 1u);
  EXPECT_EQ(j["diagnoses"][0]["code"], "attention_factor_missing");
  EXPECT_NEAR(j["attention_factor_found"].get<double>(), 1.0, 1e-6);
  ASSERT_EQ(run("check --preset qwen2.5-7b-yarn --layout vllm --cos-sin '" + path("noaf.npy") + "'", &out), 1) << out;
  EXPECT_NE(out.find("verdict: DISAGREE"), std::string::npos) << out;
  // Two-tensor layouts to .npy pairs, and back.
  ASSERT_EQ(run("export --preset llama-3.1-8b --layout onnx --max-pos 100 --cos '" + path("c.npy") + "' --sin '" + path("s.npy") + "'", &out), 0) << out;
  EXPECT_EQ(run("check --preset llama-3.1-8b --layout onnx --cos '" + path("c.npy") + "' --sin '" + path("s.npy") + "'", &out), 0) << out;
  ASSERT_EQ(run("export --preset gpt-j-6b --layout ggml --out '" + path("g.safetensors") + "'", &out), 0) << out;
  EXPECT_EQ(run("check --preset gpt-j-6b --layout ggml --inv-freq '" + path("g.safetensors") + "'", &out), 0) << out;
  EXPECT_EQ(run("check --preset llama-2-7b --layout ggml --inv-freq '" + path("g.safetensors") + "'", &out), 1) << out;
}

TEST_F(CheckCli, HostileInputsExitTwoNameTheProblemAndWriteNothing) {
  std::string out;
  ASSERT_EQ(run("export --preset llama-2-7b --layout vllm --max-pos 64 --out '" + path("good.safetensors") + "'", &out), 0) << out;
  ASSERT_EQ(run("export --preset llama-2-7b --layout vllm --max-pos 64 --out '" + path("good.npy") + "'", &out), 0) << out;
  const std::string st = testing::read_file(path("good.safetensors")), np = testing::read_file(path("good.npy"));
  write("trunc.safetensors", st.substr(0, st.size() - 5));
  write("trunc.npy", np.substr(0, np.size() - 5));
  write("header.safetensors", st.substr(0, 20));
  NpyArray odd;
  odd.shape = {4, 7};
  odd.data.resize(4 * 7 * 4);
  npy_save(path("odd.npy"), odd);
  NpyArray r3;
  r3.shape = {4, 2, 64};
  r3.data.resize(4 * 2 * 64 * 4);
  npy_save(path("rank3.npy"), r3);
  NpyArray ints;
  ints.dtype = DType::kI32;
  ints.shape = {4, 128};
  ints.data.resize(4 * 128 * 4);
  npy_save(path("ints.npy"), ints);
  NpyArray half;
  half.dtype = DType::kF16;
  half.shape = {4, 128};
  half.data.resize(4 * 128 * 2);
  npy_save(path("half.npy"), half);
  NpyArray nan = half;
  nan.dtype = DType::kF32;
  nan.data.assign(4 * 128 * 4, 0xff);
  npy_save(path("nan.npy"), nan);
  NpyArray empty;
  empty.shape = {0, 128};
  npy_save(path("empty.npy"), empty);
  NpyArray x;
  x.shape = {3, 2, 8};
  x.data.resize(3 * 2 * 8 * 4);
  for (size_t i = 0; i < x.data.size(); i += 4) x.data[i + 3] = 0x3f;  // 0.5-ish values
  npy_save(path("x.npy"), x);
  NpyArray pbad;
  pbad.dtype = DType::kI64;
  pbad.shape = {3};
  const int64_t pv[3] = {0, int64_t(1) << 40, 2};
  pbad.data.assign(reinterpret_cast<const unsigned char*>(pv), reinterpret_cast<const unsigned char*>(pv) + 24);
  npy_save(path("pbad.npy"), pbad);
  write("t.pt", "PK");
  write("cfg.txt", "x");
  std::filesystem::create_directories(path("dir.safetensors"));  // directories named like files
  std::filesystem::create_directories(path("dir.json"));
  const std::string chk = "check --preset llama-2-7b ";
  struct Case {
    std::string args;
    std::vector<std::string> needles;
    std::string output;  ///< a file that must not exist afterwards
  };
  const std::vector<Case> cases = {
      {chk + "--layout vllm --cos-sin '" + path("trunc.safetensors") + "'", {"trunc.safetensors", "the file may be truncated"}, ""},
      {chk + "--layout vllm --cos-sin '" + path("header.safetensors") + "'", {"header.safetensors", "truncated header"}, ""},
      {chk + "--layout vllm --cos-sin '" + path("trunc.npy") + "'", {"trunc.npy", "truncated data"}, ""},
      {chk + "--layout vllm --cos-sin '" + path("odd.npy") + "'", {"table width must be even", "7"}, ""},
      {chk + "--layout vllm --cos-sin '" + path("rank3.npy") + "'", {"cos_sin_cache must have shape [N, rotary_dim]", "[4, 2, 64]"}, ""},
      {chk + "--layout hf --cos '" + path("good.npy") + "' --sin '" + path("good.npy") + "'", {"must hold each frequency twice"}, ""},
      {chk + "--layout vllm --cos-sin '" + path("ints.npy") + "'", {"floating-point", "i32"}, ""},
      {chk + "--layout vllm --cos-sin '" + path("nan.npy") + "'", {"non-finite value at flat index 0"}, ""},
      {chk + "--layout flashinfer --cos-sin '" + path("half.npy") + "'", {"must be float32", "f16"}, ""},
      {chk + "--layout onnx --inv-freq '" + path("good.npy") + "'", {"onnx layout has no inv_freq"}, ""},
      {chk + "--layout vllm --cos-sin '" + path("empty.npy") + "'", {"has no rows", "[0, 128]"}, ""},
      {"check --preset llama-2-7b --layout raw --rotated '" + path("x.npy") + "' --input '" + path("x.npy") + "' --positions '" +
           path("pbad.npy") + "'", {"positions[1] must be in [0, 2^31)"}, ""},
      {chk + "--layout hf --cos-sin '" + path("t.pt") + "'", {".pt files need torch", "rotary.check"}, ""},
      {chk + "--layout hf --cos-sin '" + path("cfg.txt") + "'", {"unsupported file type", ".txt"}, ""},
      {chk + "--layout hf --cos-sin '" + path("missing.npy") + "'", {"missing.npy", "cannot open"}, ""},
      // a directory: it was "truncated: 0 bytes" (safetensors) and "error while reading" (config)
      {chk + "--layout hf --cos-sin '" + path("dir.safetensors") + "'", {"dir.safetensors: is a directory"}, ""},
      {"check --config '" + path("dir.json") + "' --layout hf --cos-sin '" + path("good.npy") + "'", {"dir.json' is a directory"}, ""},
      {chk + "--layout mlx --cos-sin '" + path("good.npy") + "'", {"layout must be one of", "mlx"}, ""},
      {chk + "--cos-sin '" + path("good.npy") + "'", {"--layout is required"}, ""},
      {chk + "--layout vllm --cos-sin '" + path("good.npy") + "' --inv-freq '" + path("good.npy") + "'", {"exactly one of"}, ""},
      {chk + "--layout vllm --cos-sin '" + path("good.npy") + "' --max-pos 0", {"--max-pos must be in [1, 2^31]"}, ""},
      {chk + "--layout vllm --cos-sin '" + path("good.npy") + "' --max-pos 2147483649", {"--max-pos must be in [1, 2^31]", "got 2147483649"}, ""},
      {chk + "--layout ggml --inv-freq '" + path("good.npy") + "'", {"ggml layout needs metadata \"mode\""}, ""},
      {"export --preset llama-2-7b --layout te --dtype bf16 --out '" + path("o.safetensors") + "'", {"te tables are float32 only"}, "o.safetensors"},
      {"export --preset llama-2-7b --layout hf --out '" + path("o.npy") + "'", {".npy holds one"}, "o.npy"},
      {"export --preset llama-2-7b --layout ggml --out '" + path("o.npy") + "'", {"--out must be .safetensors"}, "o.npy"},
      {"export --preset llama-2-7b --layout hf --out '" + path("o.txt") + "'", {"--out must end in .safetensors or .npy"}, "o.txt"},
      {"export --preset llama-2-7b --layout hf --dtype f8 --out '" + path("o.safetensors") + "'", {"--dtype must be", "f8"}, "o.safetensors"},
      {"export --preset llama-2-7b --layout vllm --max-pos 99999999 --out '" + path("o.safetensors") + "'", {"--max-pos must be in [1, 4194304]", "got 99999999"}, "o.safetensors"},
      {"export --preset llama-2-7b --layout vllm --out '" + path("nodir/o.safetensors") + "'", {"nodir/o.safetensors"}, "nodir/o.safetensors"},
      {"export --preset llama-2-7b --layout vllm --cos '" + path("o.npy") + "' --sin '" + path("o2.npy") + "'", {"is one tensor: use --out"}, "o.npy"},
      // one file named twice (sin would replace cos), also through another spelling of its path
      {"export --preset llama-2-7b --layout hf --cos '" + path("o.npy") + "' --sin '" + path("o.npy") + "'", {"--cos and --sin name the same file"}, "o.npy"},
      {"export --preset llama-2-7b --layout hf --cos '" + path("o.npy") + "' --sin '" + path("./o.npy") + "'", {"the same file"}, "o.npy"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const int rc = run(c.args, &out);
    // Usage errors ("rotary check: ..." / "rotary export: ...") exit 2; so does every error of `check`, whose
    // exit 1 means "disagrees" (docs/parity.md); export's runtime failures ("[rotary_...]") exit 1.
    const bool is_check = c.args.rfind("check ", 0) == 0;
    EXPECT_EQ(rc, is_check || out.rfind("rotary export: ", 0) == 0 ? 2 : 1) << out;
    for (const auto& n : c.needles) EXPECT_NE(out.find(n), std::string::npos) << "'" << n << "' not in: " << out;
    if (!c.output.empty()) EXPECT_FALSE(fs::exists(path(c.output))) << "output written on error";
    std::string m = out, shown = c.args, d = dir_.string() + "/";
    for (size_t at; (at = m.find(d)) != std::string::npos;) m.replace(at, d.size(), "");
    for (size_t at; (at = shown.find(d)) != std::string::npos;) shown.replace(at, d.size(), "");
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    testing::doc_row("CLI", "rotary " + shown, "exit " + std::to_string(rc), m);
  }
  // No temporary files are left behind by failed writes.
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace rotary

// Hostile inputs at the CLI: malformed/truncated .npy and config.json, bad positions and flags -> exit 1 or 2, message, no output.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "npy.h"
#include "testing/errors_doc.h"
#include "testing/shared.h"

namespace rotary {
namespace {

namespace fs = std::filesystem;

using ::rotary::testing::doc_escape;
using ::rotary::testing::doc_row;


NpyArray make(DType dt, std::vector<int64_t> shape, const void* src) {
  NpyArray a;
  a.dtype = dt;
  a.shape = std::move(shape);
  a.data.resize(static_cast<size_t>(a.numel()) * dtype_size(dt));
  if (!a.data.empty()) std::memcpy(a.data.data(), src, a.data.size());
  return a;
}

/// A .npy header with arbitrary dict text (and `data_bytes` zero bytes after it).
std::string raw_npy(const std::string& dict, size_t data_bytes, int major = 1) {
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(dict.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (major >= 2) {
    out += static_cast<char>((len >> 16) & 0xff);
    out += static_cast<char>((len >> 24) & 0xff);
  }
  return out + dict + std::string(data_bytes, '\0');
}

class HostileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_ = testing::cli_path();
    if (cli_.empty() || !fs::exists(cli_)) GTEST_SKIP() << "rotary CLI not built";
    dir_ = fs::temp_directory_path() / ("rotary_hostile_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string cli_;
  fs::path dir_;
};

TEST_F(HostileCli, EveryCaseExitsTwoNamesTheProblemAndWritesNoOutput) {
  const std::vector<float> x = testing::randn(2 * 3 * 2 * 8, 4);
  npy_save(path("x.npy"), make(DType::kF32, {2, 3, 2, 8}, x.data()));
  const std::vector<int64_t> p = {0, 1, 2, 3, 4, 5};
  npy_save(path("p.npy"), make(DType::kI64, {2, 3}, p.data()));
  const std::vector<int64_t> pmax = {0, 1, 2, 3, std::numeric_limits<int64_t>::max(), 5};
  npy_save(path("p_max.npy"), make(DType::kI64, {2, 3}, pmax.data()));
  const std::vector<int64_t> pmin = {0, 1, std::numeric_limits<int64_t>::min(), 3, 4, 5};
  npy_save(path("p_min.npy"), make(DType::kI64, {2, 3}, pmin.data()));
  const std::vector<int64_t> p31 = {0, 1, 2, int64_t(1) << 31, 4, 5};
  npy_save(path("p_2e31.npy"), make(DType::kI64, {2, 3}, p31.data()));
  const std::vector<int32_t> p3(12, 1);  // (3, 4): neither (3, B, S) nor (3, S) for S = 3
  npy_save(path("p_mrope_t.npy"), make(DType::kI32, {3, 4}, p3.data()));
  const std::vector<int64_t> p18(18, 1);
  npy_save(path("p_mrope.npy"), make(DType::kI64, {3, 2, 3}, p18.data()));
  const std::string good = npy_serialize(make(DType::kF32, {2, 3, 2, 8}, x.data()));
  write("trunc_header.npy", good.substr(0, 40));
  write("trunc_data.npy", good.substr(0, good.size() - 1));
  write("extra_data.npy", good + "xx");
  write("empty.npy", "");
  write("magic_only.npy", std::string("\x93NUMPY", 6));
  write("big_endian.npy", raw_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3, 2, 8), }\n", 384));
  write("overflow.npy", raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2, 8), }\n", 0));
  write("neg_dim.npy", raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3, 2, 8), }\n", 0));
  write("version9.npy", raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", 4, 9));
  write("bad_dict.npy", raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 2, 8) \n", 384));
  write("bool_dtype.npy", raw_npy("{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }\n", 6));
  // Fuzz regression (fuzz/corpus/npy/regression-zero-dim-huge-dims.npy): empty arrays with huge other dims.
  write("x_empty_huge.npy", raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4444444442, 4444444442, 8), }\n", 0));
  write("p_empty_huge.npy", raw_npy("{'descr': '<i8', 'fortran_order': False, 'shape': (0, 4444444442), }\n", 0));
  // Hostile sizes: a 500 kB malformed header, a header length past the limit, 4 MB of junk, a deep config.
  write("header_500k.npy", raw_npy("{" + std::string(500000, '\x01') + "}", 0, 3));
  write("header_2m.npy", raw_npy("{" + std::string(2 << 20, ' ') + "}", 0, 3));
  write("junk.npy", std::string(4 << 20, 'A'));
  write("cfg_deep.json", "{\"head_dim\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  write("cfg.json", R"({"hidden_size": 16, "num_attention_heads": 2, "max_position_embeddings": 64})");
  write("cfg_trunc.json", R"({"hidden_size": 16, "num_attention_heads": )");
  write("cfg_binary.json", std::string("\x00\xff\xfe{", 4));
  write("cfg_heads0.json", R"({"hidden_size": 16, "num_attention_heads": 0})");
  write("cfg_hd_huge.json", R"({"head_dim": 1e300})");
  write("cfg_theta_nan.json", R"({"head_dim": 8, "rope_theta": -0.0})");
  write("cfg_mrope_neg.json", R"({"head_dim": 8, "rope_scaling": {"type": "mrope", "mrope_section": [-1, 3, 2]}})");
  write("cfg_yarn_beta.json", R"({"head_dim": 8, "max_position_embeddings": 64, "rope_scaling": {"type": "yarn", "factor": 4, "beta_fast": 1, "beta_slow": 32}})");

  const std::string cfg = "--config '" + path("cfg.json") + "' ";
  auto io = [&](const std::string& in, const std::string& pos) {
    return "--input '" + path(in) + "' --positions '" + path(pos) + "' --output '" + path("y.npy") + "' ";
  };
  struct Case {
    std::string args;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {cfg + io("x.npy", "p_max.npy"), {"positions.ids[1,1]", "9223372036854775807"}},
      {cfg + io("x.npy", "p_min.npy"), {"positions.ids[0,2]", "-9223372036854775808"}},
      {cfg + io("x.npy", "p_2e31.npy"), {"positions.ids[1,0]", "2147483648"}},
      {cfg + io("trunc_header.npy", "p.npy"), {"trunc_header.npy", "truncated header"}},
      {cfg + io("trunc_data.npy", "p.npy"), {"trunc_data.npy", "truncated data", "384"}},
      {cfg + io("extra_data.npy", "p.npy"), {"extra_data.npy", "2 unexpected bytes"}},
      {cfg + io("empty.npy", "p.npy"), {"empty.npy", "bad magic", "0 bytes"}},
      {cfg + io("magic_only.npy", "p.npy"), {"magic_only.npy", "bad magic"}},
      {cfg + io("big_endian.npy", "p.npy"), {"big_endian.npy", "big-endian", ">f4"}},
      {cfg + io("overflow.npy", "p.npy"), {"overflow.npy", "4294967296", "overflows"}},
      {cfg + io("neg_dim.npy", "p.npy"), {"neg_dim.npy", "negative dimension"}},
      {cfg + io("version9.npy", "p.npy"), {"version9.npy", "version 9.0"}},
      {cfg + io("bad_dict.npy", "p.npy"), {"bad_dict.npy", "malformed header"}},
      {cfg + io("x_empty_huge.npy", "p_empty_huge.npy"), {"shape dim 1 = 4444444442", "overflow int64"}},
      {cfg + io("x.npy", "bool_dtype.npy"), {"bool_dtype.npy", "unsupported dtype", "|b1"}},
      {cfg + io("x.npy", "trunc_data.npy"), {"trunc_data.npy", "truncated data"}},
      {"--config '" + path("cfg_trunc.json") + "' " + io("x.npy", "p.npy"), {"cfg_trunc.json", "not valid JSON"}},
      {"--config '" + path("cfg_binary.json") + "' " + io("x.npy", "p.npy"), {"cfg_binary.json", "not valid JSON"}},
      {"--config '" + path("cfg_heads0.json") + "' " + io("x.npy", "p.npy"), {"num_attention_heads must be > 0", "got 0"}},
      {"--config '" + path("cfg_hd_huge.json") + "' " + io("x.npy", "p.npy"), {"head_dim must be an integer", "1e+300"}},
      {"--config '" + path("cfg_theta_nan.json") + "' " + io("x.npy", "p.npy"), {"base must be > 0", "-0"}},
      {"--config '" + path("cfg_mrope_neg.json") + "' " + io("x.npy", "p.npy"), {"mrope.section[0]", "-1"}},
      {"--config '" + path("cfg_yarn_beta.json") + "' " + io("x.npy", "p.npy"), {"beta_fast must be > scaling.beta_slow", "got 1"}},
      {cfg + io("x.npy", "p.npy") + "--layout thd", {"--input", "must have rank 3", "[2,3,2,8]"}},
      {cfg + io("x.npy", "p_mrope_t.npy") + "--mrope-section 2,1,1", {"--positions", "[3,4]", "[3,2,3]"}},
      {cfg + io("x.npy", "p.npy") + "--mrope-section 2,-1,3", {"--mrope-section", "2,-1,3"}},
      {cfg + io("x.npy", "p_mrope.npy") + "--mrope-section 9223372036854775807,9223372036854775807,2", {"mrope.section[0]", "9223372036854775807"}},
      {cfg + io("x.npy", "p.npy") + "--threads -1", {"--threads", "-1"}},
      {cfg + io("x.npy", "p.npy") + "--seq-len 99999999999999999999", {"--seq-len must be an integer", "99999999999999999999"}},
      {cfg + io("x.npy", "p.npy") + "--backend cuda", {"cuda", "without CUDA"}},
      {cfg + io("header_500k.npy", "p.npy"), {"header_500k.npy", "malformed header", "the 500002-byte header, at byte 0"}},
      {cfg + io("header_2m.npy", "p.npy"), {"header_2m.npy", "header length 2097154 is beyond rotary's limit"}},
      {cfg + io("junk.npy", "p.npy"), {"junk.npy", "bad magic", "4194304 bytes"}},
      {cfg + "--input /dev/zero --positions '" + path("p.npy") + "' --output '" + path("y.npy") + "' ", {"/dev/zero", "bad magic", "starts with \"\\x00"}},
      {"--config '" + path("cfg_deep.json") + "' " + io("x.npy", "p.npy"), {"cfg_deep.json", "deeper than 64 levels"}},
      {cfg + io("x.npy", "p.npy") + "--layout " + std::string(100, 'L'), {"--layout must be", "(100 bytes)"}},
  };
  const std::string x_bytes = testing::read_file(path("x.npy"));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    std::error_code ec;
    fs::remove(path("y.npy"), ec);
    std::string out;
    const int rc = testing::run_command("'" + cli_ + "' apply " + c.args, &out, true);
    // Usage errors ("rotary apply: ...", bad options) exit 2; bad files and data ("[rotary_...] ...") exit 1.
    EXPECT_EQ(rc, out.rfind("rotary apply: ", 0) == 0 ? 2 : 1) << out;
    {
      std::string m = out, d = dir_.string() + "/";
      for (size_t at; (at = m.find(d)) != std::string::npos;) m.replace(at, d.size(), "");
      while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
      std::string shown = c.args;
      for (size_t at; (at = shown.find(d)) != std::string::npos;) shown.replace(at, d.size(), "");
      doc_row("CLI", "rotary apply " + shown, "exit " + std::to_string(rc), m);
    }
    for (const auto& n : c.needles) EXPECT_NE(out.find(n), std::string::npos) << "'" << n << "' not in: " << out.substr(0, 2000);
    EXPECT_LT(out.size(), 1500u) << "messages quote user input cut short: " << out.substr(0, 2000);
    EXPECT_EQ(out.find("Sanitizer"), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(path("y.npy"))) << "output written on error";
  }
  EXPECT_EQ(testing::read_file(path("x.npy")), x_bytes) << "the input file must never change";
  // The same files with the good positions work (the cases fail for their own reason).
  std::string out;
  EXPECT_EQ(testing::run_command("'" + cli_ + "' apply " + cfg + io("x.npy", "p.npy"), &out, true), 0) << out;
  EXPECT_TRUE(fs::exists(path("y.npy")));
}

// Outputs are written to a temporary file and renamed over the target: a failed write (here a file-size
// limit, as on a full disk) leaves the old file intact, also when --output is --input, and leaves no
// temporary file behind; a successful --output == --input rotates the file in place.
TEST_F(HostileCli, FailedWritesLeaveTheOldFileIntactAndOutputMayBeTheInput) {
  const int64_t S = 256, H = 4, D = 64;  // 256 KiB of f32: larger than the 100 KiB limit below
  const std::vector<float> x = testing::randn(static_cast<size_t>(S * H * D), 5);
  npy_save(path("x.npy"), make(DType::kF32, {1, S, H, D}, x.data()));
  std::vector<int64_t> p(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) p[static_cast<size_t>(i)] = i;
  npy_save(path("p.npy"), make(DType::kI64, {S}, p.data()));
  write("cfg.json", R"({"head_dim": 64})");
  write("y.npy", "old contents of y");
  const std::string x_bytes = testing::read_file(path("x.npy"));
  const std::string cfg = "--config '" + path("cfg.json") + "' --positions '" + path("p.npy") + "' ";
  auto limited = [&](const std::string& args) {
    std::string out;
    // ulimit -f counts 1024-byte blocks. The CLI ignores SIGXFSZ, so its write() fails with EFBIG.
    const int rc = testing::run_command("bash -c \"ulimit -f 100; '" + cli_ + "' apply " + args + "\"", &out, true);
    return std::make_pair(rc, out);
  };
  auto [rc1, out1] = limited(cfg + "--input '" + path("x.npy") + "' --output '" + path("y.npy") + "'");
  EXPECT_EQ(rc1, 1) << out1;  // a runtime failure
  EXPECT_NE(out1.find("File too large"), std::string::npos) << out1;
  EXPECT_EQ(testing::read_file(path("y.npy")), "old contents of y") << "a failed write must leave the old output";
  auto [rc2, out2] = limited(cfg + "--input '" + path("x.npy") + "' --output '" + path("x.npy") + "'");
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_EQ(testing::read_file(path("x.npy")), x_bytes) << "a failed write over the input must leave the input";
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << "temporary file left: " << entry.path();
  // A write to a full device fails cleanly too (written directly: nothing can be renamed over a device).
  if (fs::exists("/dev/full")) {
    std::string out;
    EXPECT_EQ(testing::run_command("'" + cli_ + "' apply " + cfg + "--input '" + path("x.npy") + "' --output /dev/full", &out, true), 1) << out;
    EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
  }
  // Without the limit: --output == --input replaces the input with exactly what a separate output holds.
  std::string out;
  ASSERT_EQ(testing::run_command("'" + cli_ + "' apply " + cfg + "--input '" + path("x.npy") + "' --output '" + path("y.npy") + "'", &out, true), 0) << out;
  ASSERT_EQ(testing::run_command("'" + cli_ + "' apply " + cfg + "--input '" + path("x.npy") + "' --output '" + path("x.npy") + "'", &out, true), 0) << out;
  EXPECT_EQ(testing::read_file(path("x.npy")), testing::read_file(path("y.npy")));
  EXPECT_NE(testing::read_file(path("x.npy")), x_bytes);
}

// Every file the CLI writes goes through the same atomic writer: export (one file, or --cos/--sin) and report
// (report.json and the CSVs). Under a file-size limit each old file stays as it was, and no temporary file is
// left; before, export failed with an unnamed reason and report truncated its files in place.
TEST_F(HostileCli, EveryCommandsOutputsSurviveAFailedWrite) {
  auto limited = [&](const std::string& args, int kib) {
    std::string out;
    const int rc = testing::run_command("bash -c \"ulimit -f " + std::to_string(kib) + "; '" + cli_ + "' " + args + "\"", &out, true);
    return std::make_pair(rc, out);
  };
  write("t.safetensors", "old t");
  write("c.npy", "old c");
  write("s.npy", "old s");
  auto [rc1, out1] = limited("export --preset llama-3.1-8b --layout vllm --max-pos 4096 --out '" + path("t.safetensors") + "'", 64);
  EXPECT_EQ(rc1, 1) << out1;
  EXPECT_NE(out1.find("File too large"), std::string::npos) << out1;
  EXPECT_NE(out1.find("t.safetensors"), std::string::npos) << out1;
  EXPECT_EQ(testing::read_file(path("t.safetensors")), "old t");
  auto [rc2, out2] = limited("export --preset llama-3.1-8b --layout onnx --max-pos 4096 --cos '" + path("c.npy") + "' --sin '" + path("s.npy") + "'", 64);
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_EQ(testing::read_file(path("c.npy")), "old c");
  EXPECT_EQ(testing::read_file(path("s.npy")), "old s");
  // report: every file it writes exists with old contents; a limit of 0 blocks fails the first write.
  const std::string rep = path("rep");
  fs::create_directories(rep);
  const std::vector<std::string> files = {"report.json", "bands.csv", "decay.csv", "score.csv", "phase_error.csv"};
  for (const auto& f : files) write("rep/" + f, "old " + f);
  auto [rc3, out3] = limited("report --preset llama-3.1-8b --out '" + rep + "' --no-plots --quick", 0);
  EXPECT_EQ(rc3, 1) << out3;
  EXPECT_NE(out3.find("File too large"), std::string::npos) << out3;
  for (const auto& f : files) EXPECT_EQ(testing::read_file(rep + "/" + f), "old " + f) << f;
  for (const fs::path& d : {dir_, fs::path(rep)})
    for (const auto& entry : fs::directory_iterator(d))
      EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << "temporary file left: " << entry.path();
}

}  // namespace
}  // namespace rotary

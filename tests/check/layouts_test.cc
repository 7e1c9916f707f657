// The layout converters: each export decodes back to exactly the values written, in every layout and dtype.
#include <gtest/gtest.h>

#include <cmath>

#include "check/canonical.h"
#include "rotary/config.h"
#include "rotary/freqs.h"
#include "rotary/ggml.h"

namespace rotary {
namespace {

using parity::decode;
using parity::layout_info;

TEST(CheckLayouts, ExportDecodesToTheExactValuesRoundedOnce) {
  for (const char* name : {"llama-3.1-8b", "gpt-j-6b", "qwen2.5-7b-yarn", "gpt-neox-20b"}) {
    const Spec spec = preset(name).normalized();
    const int64_t rows = 257;
    const Frequencies f = compute_frequencies(spec, rows);
    for (EngineLayout l : {EngineLayout::kHf, EngineLayout::kVllm, EngineLayout::kFlashInfer, EngineLayout::kTe,
                           EngineLayout::kOnnx, EngineLayout::kRaw}) {
      for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
        if ((l == EngineLayout::kFlashInfer || l == EngineLayout::kTe) && dt != DType::kF32) continue;
        SCOPED_TRACE(std::string(name) + " " + engine_layout_name(l) + " " + dtype_name(dt));
        ExportOptions o;
        o.layout = l, o.dtype = dt, o.positions = rows;
        const TensorFile t = export_tables(spec, o);
        const parity::Canonical c = decode(layout_info(l), TableKind::kCosSin, t, spec.pairing, spec.effective_rotary_dim());
        ASSERT_EQ(c.half, static_cast<int64_t>(f.inv_freq.size()));
        ASSERT_EQ(c.rows(), rows);
        if (l == EngineLayout::kTe) EXPECT_EQ(c.pairing, spec.pairing);  // TE's duplication is its interleaved flag
        for (int64_t p = 0; p < rows; ++p)
          for (int64_t j = 0; j < c.half; ++j) {
            const double angle = static_cast<double>(p) * f.inv_freq[static_cast<size_t>(j)];
            const size_t k = static_cast<size_t>(p * c.half + j);
            if (c.form == parity::Form::kAngles) {
              ASSERT_EQ(c.a[k], parity::round_to(dt, angle));
            } else {
              ASSERT_EQ(c.a[k], parity::round_to(dt, f.attention_factor * std::cos(angle)));
              ASSERT_EQ(c.b[k], parity::round_to(dt, f.attention_factor * std::sin(angle)));
            }
          }
      }
    }
  }
}

TEST(CheckLayouts, InvFreqAndGgmlParameters) {
  for (const char* name : {"llama-3.1-8b", "phi-3.5-mini", "deepseek-v3", "gpt-j-6b"}) {
    SCOPED_TRACE(name);
    const Spec spec = preset(name).normalized();
    const Frequencies f = compute_frequencies(spec);
    ExportOptions o;
    o.what = TableKind::kInvFreq;
    o.layout = EngineLayout::kVllm;
    const parity::Canonical c = decode(layout_info(o.layout), o.what, export_tables(spec, o), spec.pairing, 0);
    for (size_t j = 0; j < f.inv_freq.size(); ++j) ASSERT_EQ(c.inv_freq[j], parity::round_to(DType::kF32, f.inv_freq[j]));
    // ggml: ggml_rope_ext's own formula (theta = base^(-2j/n_dims) / freq_factor_j) gives back theta_j.
    o.layout = EngineLayout::kGgml;
    const TensorFile g = export_tables(spec, o);
    GgmlRopeParams p;
    p.mode = parse_ggml_rope_mode(g.metadata.at("mode"));
    EXPECT_EQ(p.mode, spec.pairing == Pairing::kInterleaved ? GgmlRopeMode::kNormal : GgmlRopeMode::kNeox);
    p.n_dims = std::stoll(g.metadata.at("n_dims"));
    p.freq_base = std::stod(g.metadata.at("freq_base"));
    p.attn_factor = std::stod(g.metadata.at("attn_factor"));
    const NpyArray* ff = g.find("freq_factors");
    ASSERT_NE(ff, nullptr);
    for (int64_t j = 0; j < ff->numel(); ++j) p.freq_factors.push_back(ff->as<float>()[j]);
    const AxisFrequencies a = ggml_frequencies(p);
    ASSERT_EQ(a.freqs.inv_freq.size(), f.inv_freq.size());
    for (size_t j = 0; j < f.inv_freq.size(); ++j) EXPECT_NEAR(a.freqs.inv_freq[j] / f.inv_freq[j], 1.0, 1.2e-7);
    EXPECT_DOUBLE_EQ(a.freqs.attention_factor, f.attention_factor);
  }
}

TEST(CheckLayouts, BadOptionsAreNamed) {
  const Spec spec = preset("llama-2-7b");
  ExportOptions o;
  o.layout = EngineLayout::kFlashInfer;
  o.dtype = DType::kBF16;
  EXPECT_THROW(export_tables(spec, o), Error);
  o = {};
  o.layout = EngineLayout::kOnnx;
  o.what = TableKind::kInvFreq;
  EXPECT_THROW(export_tables(spec, o), Error);
  o = {};
  o.positions = (int64_t(1) << 22) + 1;
  EXPECT_THROW(export_tables(spec, o), Error);
  EXPECT_THROW(parse_engine_layout("mlx"), Error);
}

}  // namespace
}  // namespace rotary

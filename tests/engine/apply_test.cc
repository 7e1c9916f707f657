// Apply vs an independent long-double formula over dtype x layout x pairing x direction x dims x positions x source.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/test_tensors.h"
#include "rotary/rotary.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

using enginetest::TestTensor;

enum class Scheme { kOffset, kIdsI32, kIdsI64Broadcast, kPacked };
enum class Source { kTable, kFrequencies, kCaller2, kCaller3 };

const char* scheme_name(Scheme s) {
  switch (s) {
    case Scheme::kOffset: return "offset";
    case Scheme::kIdsI32: return "ids_i32";
    case Scheme::kIdsI64Broadcast: return "ids_i64_bcast";
    case Scheme::kPacked: return "packed";
  }
  return "?";
}
const char* source_name(Source s) {
  switch (s) {
    case Source::kTable: return "table";
    case Source::kFrequencies: return "freqs";
    case Source::kCaller2: return "caller2";
    case Source::kCaller3: return "caller3";
  }
  return "?";
}

struct Case {
  DType dtype;
  Layout layout;
  Pairing pairing;
  Direction direction;
  int64_t D, R;
  Scheme scheme;
  Source source;
  bool inplace;
  Backend backend;
  std::string label() const {
    return std::string(dtype_name(dtype)) + "/" + layout_name(layout) + "/" + pairing_name(pairing) + "/" +
           direction_name(direction) + "/D" + std::to_string(D) + "R" + std::to_string(R) + "/" + scheme_name(scheme) +
           "/" + source_name(source) + (inplace ? "/inplace" : "/outofplace") +
           (backend == Backend::kReference ? "/reference" : "/auto");
  }
};

/// Runs one case and compares q and k against the long-double truth. Returns false on failure.
void run_case(const Case& c) {
  SCOPED_TRACE(c.label());
  const bool thd = c.layout == Layout::kTHD;
  const int64_t B = thd ? 1 : 2, S = thd ? 6 : 5, Hq = 3, Hk = 1;
  const double af = (c.source == Source::kTable || c.source == Source::kFrequencies) ? 1.0625 : 1.0;
  const auto theta = enginetest::truth_theta(10000.0L, c.R);
  const Frequencies freqs = enginetest::to_frequencies(theta, af);

  TestTensor q(c.dtype, c.layout, B, S, Hq, c.D, 1), k(c.dtype, c.layout, B, S, Hk, c.D, 0);
  q.fill_randn(11);
  k.fill_randn(12);
  const TestTensor q_in = q, k_in = k;
  std::unique_ptr<TestTensor> q_out, k_out;
  ApplyArgs args;
  args.layout = c.layout;
  args.pairing = c.pairing;
  args.direction = c.direction;
  args.backend = c.backend;
  args.threads = 2;
  args.q = q.view();
  args.k = k.view();
  if (!c.inplace) {
    q_out = std::make_unique<TestTensor>(c.dtype, c.layout, B, S, Hq, c.D, 3);
    k_out = std::make_unique<TestTensor>(c.dtype, c.layout, B, S, Hk, c.D, 2);
    args.q_out = q_out->view();
    args.k_out = k_out->view();
  }

  // Positions and their independently computed values pos[b][s].
  std::vector<std::vector<int64_t>> pos(static_cast<std::size_t>(B), std::vector<int64_t>(static_cast<std::size_t>(S)));
  std::vector<int64_t> batch_off, ids64, cu, seq_off;
  std::vector<int32_t> ids32;
  switch (c.scheme) {
    case Scheme::kOffset: {
      const int64_t offset = c.source == Source::kCaller3 ? 0 : 7;
      args.positions = Positions::contiguous(offset);
      if (c.source != Source::kCaller3) {
        batch_off = thd ? std::vector<int64_t>{3} : std::vector<int64_t>{0, 100};
        args.positions.batch_offsets = TensorView::contiguous(batch_off.data(), DType::kI64, {B});
      }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) pos[b][s] = offset + (batch_off.empty() ? 0 : batch_off[b]) + s;
      break;
    }
    case Scheme::kIdsI32: {
      for (int64_t i = 0; i < B * S; ++i) ids32.push_back(static_cast<int32_t>((i * 37 + 5) % 61));
      args.positions = Positions::from_ids(thd ? TensorView::contiguous(ids32.data(), DType::kI32, {S})
                                                 : TensorView::contiguous(ids32.data(), DType::kI32, {B, S}));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) pos[b][s] = ids32[static_cast<std::size_t>(b * S + s)];
      break;
    }
    case Scheme::kIdsI64Broadcast: {
      for (int64_t s = 0; s < S; ++s) ids64.push_back(1000 - 90 * s);
      args.positions = Positions::from_ids(TensorView::contiguous(ids64.data(), DType::kI64, {S}));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s) pos[b][s] = ids64[static_cast<std::size_t>(s)];
      break;
    }
    case Scheme::kPacked: {
      cu = {0, 2, 2, S};  // sequences of length 2, 0, S-2
      seq_off = {4, 9, 0};
      args.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI64, {4}),
                                         TensorView::contiguous(seq_off.data(), DType::kI64, {3}));
      for (int64_t s = 0; s < S; ++s) {
        const int64_t n = s < 2 ? 0 : 2;
        pos[0][s] = seq_off[n] + s - cu[n];
      }
      break;
    }
  }
  int64_t max_pos = 0;
  for (auto& row : pos)
    for (int64_t p : row) max_pos = std::max(max_pos, p);

  // Caller tables hold (dtype-rounded) cos/sin values; the truth uses exactly those values.
  const int64_t h = c.R / 2;
  const DType cs_dtype = c.dtype == DType::kF64 ? DType::kF64 : (c.dtype == DType::kF16 ? DType::kF16 : DType::kF32);
  std::unique_ptr<TestTensor> cos_t, sin_t;  // reuse TestTensor storage: logical (rows, 1, 1, h)
  auto caller_value = [&](const TestTensor& t, int64_t row) {
    std::vector<long double> v(static_cast<std::size_t>(h));
    for (int64_t j = 0; j < h; ++j) v[static_cast<std::size_t>(j)] = t.get(0, row, 0, j);
    return v;
  };
  TensorView cos_v, sin_v;
  if (c.source == Source::kCaller2 || c.source == Source::kCaller3) {
    const int64_t rows = c.source == Source::kCaller2 ? max_pos + 1 : B * S;
    cos_t = std::make_unique<TestTensor>(cs_dtype, Layout::kBSHD, 1, rows, 1, h, 0);
    sin_t = std::make_unique<TestTensor>(cs_dtype, Layout::kBSHD, 1, rows, 1, h, 0);
    for (int64_t r = 0; r < rows; ++r) {
      const long double p = c.source == Source::kCaller2 ? r : pos[r / S][r % S];
      for (int64_t j = 0; j < h; ++j) {
        cos_t->set(0, r, 0, j, static_cast<double>(cosl(p * theta[j])));
        sin_t->set(0, r, 0, j, static_cast<double>(sinl(p * theta[j])));
      }
    }
    if (c.source == Source::kCaller2) {
      cos_v = TensorView::contiguous(cos_t->view().data, cs_dtype, {rows, h});
      sin_v = TensorView::contiguous(sin_t->view().data, cs_dtype, {rows, h});
    } else {
      cos_v = TensorView::contiguous(cos_t->view().data, cs_dtype, {B, S, h});
      sin_v = TensorView::contiguous(sin_t->view().data, cs_dtype, {B, S, h});
    }
  }

  switch (c.source) {
    case Source::kTable: {
      CosSinTable table(freqs);
      apply_table(table, args);
      EXPECT_GE(table.size(), max_pos + 1);
      break;
    }
    case Source::kFrequencies: apply_frequencies(freqs, args); break;
    case Source::kCaller2:
    case Source::kCaller3: apply_cos_sin(cos_v, sin_v, args); break;
  }

  const bool ref = c.backend == Backend::kReference;
  int failures = 0;
  auto check = [&](const TestTensor& in, const TestTensor& out, const char* name) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t hh = 0; hh < in.H(); ++hh) {
          const auto x = in.head(b, s, hh);
          std::vector<double> want;
          if (cos_t) {
            const int64_t row = c.source == Source::kCaller2 ? pos[b][s] : b * S + s;
            want = enginetest::truth_rotate_cs(x, c.R, c.pairing, c.direction, caller_value(*cos_t, row),
                                               caller_value(*sin_t, row));
          } else {
            const long double p = pos[b][s];
            want = enginetest::truth_rotate(x, c.R, c.pairing, c.direction, theta, af, [&](int64_t) { return p; });
          }
          for (int64_t d = 0; d < c.D; ++d) {
            const double got = out.get(b, s, hh, d);
            if (d >= c.R) {
              if (out.raw(b, s, hh, d) != in.raw(b, s, hh, d) && failures++ < 5)
                ADD_FAILURE() << name << " pass-through channel " << d << " changed at b" << b << " s" << s << " h" << hh;
              continue;
            }
            // |x0| + |x1| bounds the effect of the f32 rounding of cos and sin (<= 2^-25 each).
            const int64_t j = c.pairing == Pairing::kHalfSplit ? d % (c.R / 2) : d / 2;
            const int64_t i0 = c.pairing == Pairing::kHalfSplit ? j : 2 * j;
            const int64_t i1 = c.pairing == Pairing::kHalfSplit ? j + c.R / 2 : 2 * j + 1;
            const double cs_err = 6.1e-8 * af * (std::fabs(x[i0]) + std::fabs(x[i1]));
            const double w = want[static_cast<std::size_t>(d)];
            double tol;
            if (ref) tol = 0.5 * enginetest::ulp(c.dtype, std::fabs(w) + cs_err) + cs_err + 1e-15;
            else if (c.dtype == DType::kBF16 || c.dtype == DType::kF16)
              tol = enginetest::ulp(c.dtype, std::fabs(w) + cs_err) + cs_err + 1e-6;
            else tol = testing::output_abs_tol(c.dtype) + cs_err;
            if (!(std::fabs(got - w) <= tol) && failures++ < 5)
              ADD_FAILURE() << name << "[b" << b << " s" << s << " h" << hh << " d" << d << "] pos " << pos[b][s]
                            << ": got " << got << " want " << w << " (|err| " << std::fabs(got - w) << " > tol " << tol << ")";
          }
        }
  };
  check(q_in, c.inplace ? q : *q_out, "q");
  check(k_in, c.inplace ? k : *k_out, "k");
  EXPECT_TRUE(q.padding_intact());
  EXPECT_TRUE(k.padding_intact());
  if (!c.inplace) {
    EXPECT_TRUE(q_out->padding_intact());
    EXPECT_TRUE(k_out->padding_intact());
    EXPECT_EQ(q.bytes(), q_in.bytes()) << "out-of-place apply modified its input q";
    EXPECT_EQ(k.bytes(), k_in.bytes()) << "out-of-place apply modified its input k";
  }
  EXPECT_EQ(failures, 0);
}

class ApplySweep : public ::testing::TestWithParam<Backend> {};

TEST_P(ApplySweep, MatchesLongDoubleTruth) {
  const Backend backend = GetParam();
  int cases = 0;
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16})
    for (Layout layout : {Layout::kBSHD, Layout::kBHSD, Layout::kTHD})
      for (Pairing pairing : {Pairing::kHalfSplit, Pairing::kInterleaved})
        for (Direction dir : {Direction::kForward, Direction::kInverse})
          for (auto [D, R] : std::vector<std::pair<int64_t, int64_t>>{{64, 64}, {80, 32}, {96, 96}, {10, 6}})
            for (Scheme scheme : {Scheme::kOffset, Scheme::kIdsI32, Scheme::kIdsI64Broadcast, Scheme::kPacked})
              for (Source source : {Source::kTable, Source::kFrequencies, Source::kCaller2, Source::kCaller3})
                for (bool inplace : {true, false}) {
                  if (scheme == Scheme::kPacked && layout != Layout::kTHD) continue;
                  if (source == Source::kCaller3 && scheme != Scheme::kOffset) continue;
                  // Keep the sweep affordable: the full dims list only for one dtype.
                  if (dt != DType::kF32 && (D == 96 || D == 10) && source != Source::kFrequencies) continue;
                  run_case(Case{dt, layout, pairing, dir, D, R, scheme, source, inplace, backend});
                  ++cases;
                  if (HasFailure()) return;
                }
  EXPECT_GT(cases, 1000);
}

INSTANTIATE_TEST_SUITE_P(Backends, ApplySweep, ::testing::Values(Backend::kReference, Backend::kAuto),
                         [](const auto& info) { return info.param == Backend::kReference ? "reference" : "auto"; });

}  // namespace
}  // namespace rotary

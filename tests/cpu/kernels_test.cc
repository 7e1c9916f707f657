// CPU SIMD kernels vs the reference kernel: every runnable ISA target, dtype, pairing, direction, odd sizes,
// misaligned and strided rows, streamed stores, position/cos-sin sources, and thread-count independence.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "plan/plan.h"
#include "testing/shared.h"
#include "testing/tolerances.h"

namespace rotary {
namespace {

using detail::Plan;
using detail::PlanCosSin;
using detail::PlanPositions;

enum class Strides { kBSHD, kBHSD, kFusedQKV };
enum class Source { kTableOffset, kTableIds, kOnTheFly };

struct Case {
  DType dtype = DType::kF32;
  Pairing pairing = Pairing::kHalfSplit;
  Direction direction = Direction::kForward;
  bool inplace = true;
  bool k_out_of_place = false;  ///< with inplace: q in place, k out of place
  int64_t head_dim = 128;
  int64_t rotary_dim = 128;
  int64_t B = 1, S = 3, hq = 4, hk = 2;  ///< hk = 0: q only
  Strides strides = Strides::kBSHD;
  int64_t misalign = 0;  ///< elements added to every base pointer
  bool aligned_out = false;  ///< out of place: 64-byte aligned, contiguous output rows (streamable)
  Source source = Source::kTableOffset;
  int64_t offset = 5;

  std::string name() const {
    return std::string(dtype_name(dtype)) + "/" + pairing_name(pairing) + "/" + direction_name(direction) +
           (inplace ? (k_out_of_place ? "/q-inplace-k-not" : "/inplace") : "/outofplace") + " D=" + std::to_string(head_dim) +
           " R=" + std::to_string(rotary_dim) + " B=" + std::to_string(B) + " S=" + std::to_string(S) +
           " hq=" + std::to_string(hq) + " hk=" + std::to_string(hk) + " strides=" +
           std::to_string(static_cast<int>(strides)) + " misalign=" + std::to_string(misalign) +
           " source=" + std::to_string(static_cast<int>(source));
  }
};

constexpr uint16_t kCanary16 = 0x7E01;  // a NaN payload no kernel produces
constexpr uint32_t kCanary32 = 0x7FC01234u;

/// 64-byte aligned storage, so that offsets from a buffer's start have the same alignment in every
/// fixture (and in copies of it).
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const Aligned64<U>&) const { return true; }
};
using Bytes = std::vector<unsigned char, Aligned64<unsigned char>>;

/// Owns raw storage for every tensor of a case, laid out as the case's strides say, with canaries
/// around and between rows so that stray writes are detected.
struct Buffers {
  size_t esize = 4;
  Bytes q, k, q_out, k_out;
  // element strides (b, s, h), channel stride 1
  int64_t q_sb, q_ss, q_sh, k_sb, k_ss, k_sh, k_base, o_q_sb, o_q_ss, o_q_sh, o_k_sb, o_k_ss, o_k_sh;
};

void fill_canary(Bytes& v, size_t esize) {
  for (size_t i = 0; i + esize <= v.size(); i += esize) {
    if (esize == 2) std::memcpy(&v[i], &kCanary16, 2);
    else std::memcpy(&v[i], &kCanary32, 4);
  }
}

void store_value(unsigned char* p, DType dtype, float x) {
  if (dtype == DType::kF32) {
    std::memcpy(p, &x, 4);
  } else {
    const uint16_t b = dtype == DType::kBF16 ? testing::f32_to_bf16_bits(x) : testing::f32_to_f16_bits(x);
    std::memcpy(p, &b, 2);
  }
}

float load_value(const unsigned char* p, DType dtype) {
  if (dtype == DType::kF32) {
    float x;
    std::memcpy(&x, p, 4);
    return x;
  }
  uint16_t b;
  std::memcpy(&b, p, 2);
  return dtype == DType::kBF16 ? testing::bf16_bits_to_f32(b) : testing::f16_bits_to_f32(b);
}

/// Everything a Plan points at, kept alive together.
struct Fixture {
  Case c;
  Buffers buf;
  std::vector<float> table;
  std::vector<int64_t> ids;
  std::vector<double> inv_freq;
  Plan plan;

  explicit Fixture(const Case& cs) : c(cs) {
    const int64_t D = c.head_dim, H = c.hq + 2 * c.hk, pad = 8;
    buf.esize = dtype_size(c.dtype);
    // Input strides per layout. kFusedQKV: one [B,S,hq+2hk,D+pad] buffer, q then k then (unused) v.
    switch (c.strides) {
      case Strides::kBSHD:
        buf.q_sh = D; buf.q_ss = c.hq * D; buf.q_sb = c.S * c.hq * D;
        buf.k_sh = D; buf.k_ss = c.hk * D; buf.k_sb = c.S * c.hk * D;
        buf.k_base = 0;
        break;
      case Strides::kBHSD:
        buf.q_ss = D; buf.q_sh = c.S * D; buf.q_sb = c.hq * c.S * D;
        buf.k_ss = D; buf.k_sh = c.S * D; buf.k_sb = c.hk * c.S * D;
        buf.k_base = 0;
        break;
      case Strides::kFusedQKV:
        buf.q_sh = buf.k_sh = D + pad;
        buf.q_ss = buf.k_ss = H * (D + pad);
        buf.q_sb = buf.k_sb = c.S * H * (D + pad);
        buf.k_base = c.hq * (D + pad);
        break;
    }
    // Outputs (out of place): contiguous bshd with a padded head stride.
    const int64_t od = c.aligned_out ? D : D + 2;
    buf.o_q_sh = od; buf.o_q_ss = c.hq * od; buf.o_q_sb = c.S * c.hq * od;
    buf.o_k_sh = od; buf.o_k_ss = c.hk * od; buf.o_k_sb = c.S * c.hk * od;

    const int64_t in_elems = c.strides == Strides::kFusedQKV ? c.B * c.S * H * (D + pad)
                                                             : c.B * c.S * c.hq * D;
    const int64_t k_elems = c.strides == Strides::kFusedQKV ? 0 : c.B * c.S * c.hk * D;
    const int64_t guard = 16;
    auto alloc = [&](Bytes& v, int64_t elems) {
      v.assign(static_cast<size_t>((elems + 2 * guard) * static_cast<int64_t>(buf.esize)), 0);
      fill_canary(v, buf.esize);
    };
    alloc(buf.q, in_elems);
    alloc(buf.k, k_elems);
    alloc(buf.q_out, c.B * c.S * c.hq * (D + 2) + 64);
    alloc(buf.k_out, c.B * c.S * c.hk * (D + 2) + 64);
    if (c.aligned_out) {  // whole cache lines: the streamed path
      q_out_shift = (64 - reinterpret_cast<uintptr_t>(base(buf.q_out)) % 64) % 64;
      k_out_shift = (64 - reinterpret_cast<uintptr_t>(base(buf.k_out)) % 64) % 64;
    }

    // Random inputs in every channel of every row (padding keeps its canaries).
    std::vector<float> r = testing::randn(static_cast<size_t>(c.B * c.S * (c.hq + c.hk) * D), 1234);
    size_t n = 0;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t s = 0; s < c.S; ++s) {
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t d = 0; d < D; ++d) store_value(q_elem(false, b, s, h, d), c.dtype, r[n++]);
        for (int64_t h = 0; h < c.hk; ++h)
          for (int64_t d = 0; d < D; ++d) store_value(k_elem(false, b, s, h, d), c.dtype, r[n++]);
      }

    // cos/sin: theta_i = 10000^(-2i/R), attention factor 0.9, a table covering every position used.
    const int64_t half = c.rotary_dim / 2;
    for (int64_t i = 0; i < half; ++i) inv_freq.push_back(std::pow(10000.0, -2.0 * i / c.rotary_dim));
    const int64_t npos = c.offset + c.S + 50;
    table.resize(static_cast<size_t>(npos * 2 * half));
    for (int64_t p = 0; p < npos; ++p)
      for (int64_t i = 0; i < half; ++i) {
        table[p * 2 * half + i] = static_cast<float>(0.9 * std::cos(p * inv_freq[i]));
        table[p * 2 * half + half + i] = static_cast<float>(0.9 * std::sin(p * inv_freq[i]));
      }
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t s = 0; s < c.S; ++s) ids.push_back((b * 7 + s * 13 + 3) % npos);

    plan.dtype = c.dtype;
    plan.pairing = c.pairing;
    plan.direction = c.direction;
    plan.head_dim = D;
    plan.rotary_dim = c.rotary_dim;
    plan.half = half;
    plan.B = c.B;
    plan.S = c.S;
    plan.ntensors = c.hk > 0 ? 2 : 1;
    plan.threads = 1;
    auto& tq = plan.t[0];
    tq.in = base(buf.q);
    tq.heads = c.hq;
    tq.in_sb = buf.q_sb; tq.in_ss = buf.q_ss; tq.in_sh = buf.q_sh;
    if (c.inplace) {
      tq.out = const_cast<void*>(tq.in);
      tq.out_sb = tq.in_sb; tq.out_ss = tq.in_ss; tq.out_sh = tq.in_sh;
    } else {
      tq.out = base(buf.q_out);
      tq.out_sb = buf.o_q_sb; tq.out_ss = buf.o_q_ss; tq.out_sh = buf.o_q_sh;
    }
    if (c.hk > 0) {
      auto& tk = plan.t[1];
      tk.in = c.strides == Strides::kFusedQKV ? static_cast<unsigned char*>(base(buf.q)) + buf.k_base * buf.esize
                                              : base(buf.k);
      tk.heads = c.hk;
      tk.in_sb = buf.k_sb; tk.in_ss = buf.k_ss; tk.in_sh = buf.k_sh;
      if (c.inplace && !c.k_out_of_place) {
        tk.out = const_cast<void*>(tk.in);
        tk.out_sb = tk.in_sb; tk.out_ss = tk.in_ss; tk.out_sh = tk.in_sh;
      } else {
        tk.out = base(buf.k_out);
        tk.out_sb = buf.o_k_sb; tk.out_ss = buf.o_k_ss; tk.out_sh = buf.o_k_sh;
      }
    }
    switch (c.source) {
      case Source::kTableOffset:
        plan.pos.kind = PlanPositions::Kind::kOffset;
        plan.pos.offset = c.offset;
        plan.cs.kind = PlanCosSin::Kind::kTable;
        break;
      case Source::kTableIds:
        plan.pos.kind = PlanPositions::Kind::kIds;
        plan.pos.ids = ids.data();
        plan.pos.ids_dtype = DType::kI64;
        plan.pos.ids_sb = c.S;
        plan.pos.ids_ss = 1;
        plan.cs.kind = PlanCosSin::Kind::kTable;
        break;
      case Source::kOnTheFly:
        plan.pos.kind = PlanPositions::Kind::kOffset;
        plan.pos.offset = c.offset;
        plan.cs.kind = PlanCosSin::Kind::kOnTheFly;
        plan.cs.inv_freq = inv_freq.data();
        plan.cs.attention_factor = 0.9;
        break;
    }
    plan.cs.table = table.data();
    plan.cs.table_size = npos;
  }

  /// Byte offsets that put the outputs on a cache line (aligned_out), fixed at construction so that
  /// copies of the fixture (whose buffers move) address the same elements.
  size_t q_out_shift = 0, k_out_shift = 0;

  void* base(Bytes& v) {
    unsigned char* p = v.data() + (16 + c.misalign) * buf.esize;
    if (&v == &buf.q_out) p += q_out_shift;
    if (&v == &buf.k_out) p += k_out_shift;
    return p;
  }

  unsigned char* q_elem(bool out, int64_t b, int64_t s, int64_t h, int64_t d) {
    if (out && !c.inplace)
      return static_cast<unsigned char*>(base(buf.q_out)) +
             (b * buf.o_q_sb + s * buf.o_q_ss + h * buf.o_q_sh + d) * buf.esize;
    return static_cast<unsigned char*>(base(buf.q)) + (b * buf.q_sb + s * buf.q_ss + h * buf.q_sh + d) * buf.esize;
  }
  unsigned char* k_elem(bool out, int64_t b, int64_t s, int64_t h, int64_t d) {
    if (out && (!c.inplace || c.k_out_of_place))
      return static_cast<unsigned char*>(base(buf.k_out)) +
             (b * buf.o_k_sb + s * buf.o_k_ss + h * buf.o_k_sh + d) * buf.esize;
    auto& v = c.strides == Strides::kFusedQKV ? buf.q : buf.k;
    const int64_t kb = c.strides == Strides::kFusedQKV ? buf.k_base : 0;
    return static_cast<unsigned char*>(base(v)) + (kb + b * buf.k_sb + s * buf.k_ss + h * buf.k_sh + d) * buf.esize;
  }
};

/// Compares two runs of the same case element by element (rotated channels within the dtype's
/// tolerance, or exactly when `exact`), and checks that every other byte of every buffer is identical.
void expect_same(const Fixture& want_in, const Fixture& got_in, bool exact, const std::string& what) {
  Fixture want = want_in, got = got_in;  // copies: the output elements are zeroed below
  const Case& c = want.c;
  const double tol = exact ? 0.0 : testing::output_abs_tol(c.dtype);
  int bad = 0;
  double worst = 0;
  int64_t compared = 0, differ_bits = 0;
  auto check = [&](unsigned char* w, unsigned char* g, int64_t d) {
    const float a = load_value(w, c.dtype), b = load_value(g, c.dtype);
    const bool pass_through = d >= c.rotary_dim;
    const bool ok = (exact || pass_through) ? std::memcmp(w, g, want.buf.esize) == 0 : std::fabs(a - b) <= tol;
    worst = std::max(worst, static_cast<double>(std::fabs(a - b)));
    ++compared;
    if (std::memcmp(w, g, want.buf.esize) != 0) ++differ_bits;
    if (!ok && ++bad <= 5) ADD_FAILURE() << what << " " << c.name() << " channel " << d << ": want " << a << " got " << b;
  };
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t s = 0; s < c.S; ++s)
      for (int64_t d = 0; d < c.head_dim; ++d) {
        for (int64_t h = 0; h < c.hq; ++h) check(want.q_elem(true, b, s, h, d), got.q_elem(true, b, s, h, d), d);
        for (int64_t h = 0; h < c.hk; ++h) check(want.k_elem(true, b, s, h, d), got.k_elem(true, b, s, h, d), d);
      }
  // Both round to nearest even once (the reference from double, the kernel from f32), so 16-bit
  // outputs may differ only where the two intermediates straddle a rounding boundary: rarely.
  // (Truncation instead of rounding would differ in about half of the elements.)
  if (!exact && c.dtype != DType::kF32) {
    EXPECT_LE(differ_bits, compared / 500 + 1) << what << " " << c.name() << ": " << differ_bits << " of "
                                               << compared << " elements differ in their bits";
  }
  // Zero the compared output elements, then every remaining byte (canaries, inputs of out-of-place
  // runs, padding) must be identical: nothing outside the rows was written.
  for (Fixture* f : {&want, &got})
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t s = 0; s < c.S; ++s)
        for (int64_t d = 0; d < c.head_dim; ++d) {
          for (int64_t h = 0; h < c.hq; ++h) std::memset(f->q_elem(true, b, s, h, d), 0, f->buf.esize);
          for (int64_t h = 0; h < c.hk; ++h) std::memset(f->k_elem(true, b, s, h, d), 0, f->buf.esize);
        }
  EXPECT_TRUE(want.buf.q == got.buf.q) << what << " " << c.name() << ": q buffer differs outside outputs";
  EXPECT_TRUE(want.buf.k == got.buf.k) << what << " " << c.name() << ": k buffer differs outside outputs";
  EXPECT_TRUE(want.buf.q_out == got.buf.q_out) << what << " " << c.name() << ": q_out differs outside outputs";
  EXPECT_TRUE(want.buf.k_out == got.buf.k_out) << what << " " << c.name() << ": k_out differs outside outputs";
}

/// Runs the case through the dispatched kernel (optionally with streamed stores) and the reference.
void check_case(const Case& c, bool stream, bool row_outer, const std::string& target) {
  Fixture want(c), got(c);
  detail::reference_apply(want.plan);
  detail::cpu::RowJob job;
  job.plan = &got.plan;
  job.rows_per_token = c.hq + c.hk;
  job.total_rows = c.B * c.S * job.rows_per_token;
  job.stream = stream;
  job.row_outer = row_outer;
  job.table_fast = c.source == Source::kTableOffset;
  detail::cpu::run_rows(job, 0, job.total_rows);
  expect_same(want, got, false, target + (stream ? " stream" : "") + (row_outer ? " row-outer" : " block-outer"));
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (Pairing pr : {Pairing::kHalfSplit, Pairing::kInterleaved})
      for (Direction dir : {Direction::kForward, Direction::kInverse})
        for (bool inplace : {true, false}) {
          Case base;
          base.dtype = dt;
          base.pairing = pr;
          base.direction = dir;
          base.inplace = inplace;
          for (int64_t D : {64, 80, 96, 128, 256}) {
            Case c = base;
            c.head_dim = c.rotary_dim = D;
            cases.push_back(c);
          }
          Case c = base;
          c.head_dim = 128; c.rotary_dim = 64;  // partial rotary
          cases.push_back(c);
          c.head_dim = 80; c.rotary_dim = 24;  // half = 12
          c.misalign = 1;
          cases.push_back(c);
          c.head_dim = 10; c.rotary_dim = 6;  // half = 3: only remainder lanes
          c.strides = Strides::kBHSD;
          cases.push_back(c);
          c = base;  // one token, one head, q only
          c.S = 1; c.hq = 1; c.hk = 0; c.head_dim = c.rotary_dim = 96; c.misalign = 1;
          cases.push_back(c);
          c = base;  // fused QKV slices with GQA head counts, batched, ids and on-the-fly sources
          c.B = 2; c.S = 5; c.hq = 6; c.hk = 2; c.strides = Strides::kFusedQKV; c.source = Source::kTableIds;
          cases.push_back(c);
          c.strides = Strides::kBHSD; c.source = Source::kOnTheFly; c.head_dim = 96; c.rotary_dim = 80;
          c.misalign = 1;
          cases.push_back(c);
          if (!inplace) {  // 64-byte aligned output rows of whole cache lines: non-temporal stores
            c = base;
            c.S = 4; c.hq = 3; c.hk = 2; c.aligned_out = true;
            cases.push_back(c);
          }
          c = base;  // every row on a cache line (in place too): the unpeeled prefetching path
          c.S = 4; c.hq = 3; c.hk = 2; c.aligned_out = !inplace;
          c.misalign = dtype_size(dt) == 2 ? 16 : 0;  // buffers start 16 elements past a line
          cases.push_back(c);
          c.head_dim = c.rotary_dim = 96;  // ... with a rotated width that is not whole vectors
          cases.push_back(c);
          c = base;  // more rows per token than one row batch (64), partial rotary, q in place / k not
          c.S = 2; c.hq = 66; c.hk = 3; c.head_dim = 64; c.rotary_dim = 48; c.k_out_of_place = inplace;
          cases.push_back(c);
        }
  return cases;
}

class CpuKernelsTest : public ::testing::Test {
 protected:
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

TEST_F(CpuKernelsTest, EveryRunnableTargetMatchesReference) {
  const std::vector<int64_t> targets = detail::cpu::runnable_targets();
  ASSERT_FALSE(targets.empty());
  const std::vector<Case> cases = all_cases();
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = hwy::TargetName(target);
    ASSERT_EQ(std::string(detail::cpu::dispatched_target_name()), name) << "dispatch did not switch target";
    for (const Case& c : cases) {
      for (bool row_outer : {false, true}) {
        check_case(c, false, row_outer, name);
        if (!c.inplace) check_case(c, true, row_outer, name);
      }
    }
    if (HasFailure()) return;  // one target's failures are enough to read
  }
}

TEST_F(CpuKernelsTest, TargetsIncludeTheBestOneAndScalar) {
  // The dispatched default must be the best runnable target, and the portable one is always built.
  const std::vector<int64_t> targets = detail::cpu::runnable_targets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(std::string(detail::cpu::dispatched_target_name()), hwy::TargetName(targets.front()));
  EXPECT_TRUE(targets.back() == HWY_SCALAR || targets.back() == HWY_EMU128) << hwy::TargetName(targets.back());
}

TEST_F(CpuKernelsTest, TargetLimitDispatchesToTheNamedTarget) {
  // The mechanism behind ROTARY_CPU_TARGET: dispatch goes to the named target (any case), "" lifts the
  // limit, and an unknown name changes nothing.
  const char* env = std::getenv("ROTARY_CPU_TARGET");
  ASSERT_TRUE(detail::cpu::limit_target(""));
  const std::vector<int64_t> targets = detail::cpu::runnable_targets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    std::string name = hwy::TargetName(target);
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    ASSERT_TRUE(detail::cpu::limit_target(name)) << name;
    EXPECT_EQ(std::string(detail::cpu::dispatched_target_name()), hwy::TargetName(target));
  }
  EXPECT_FALSE(detail::cpu::limit_target("AVX9"));
  EXPECT_EQ(std::string(detail::cpu::dispatched_target_name()), hwy::TargetName(targets.back()));
  // Listing the targets keeps the limit (Highway 1.0.3's SupportedTargets() alone would lift it).
  EXPECT_EQ(detail::cpu::runnable_targets().front(), targets.back());
  EXPECT_EQ(std::string(detail::cpu::dispatched_target_name()), hwy::TargetName(targets.back()));
  EXPECT_TRUE(detail::cpu::limit_target(""));
  EXPECT_EQ(std::string(detail::cpu::dispatched_target_name()), hwy::TargetName(targets.front()));
  detail::cpu::limit_target(env != nullptr ? env : "");  // the environment's limit, for the other tests
}

TEST_F(CpuKernelsTest, SpecialValuesRoundLikeTheReference) {
  // Inf, NaN, huge and subnormal-producing inputs: identical classes and RNE results on every target.
  for (int64_t target : detail::cpu::runnable_targets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (DType dt : {DType::kF16, DType::kBF16, DType::kF32})
    for (int64_t position : {0, 1}) {  // position 0: cos 0.9, sin 0; position 1: both non-zero
      Case c;
      c.dtype = dt;
      c.S = 1; c.hq = 1; c.hk = 0; c.head_dim = c.rotary_dim = 32; c.offset = position;
      Fixture want(c), got(c);
      const float specials[] = {INFINITY, -INFINITY, NAN, 65504.f, 70000.f, 1e-6f, -3e-8f, 6.2e-5f,
                                3.4e38f, -1e-40f, 0.f, -0.f, 1.f + 1.f / 512, 2.f, 1e5f, 5.9604645e-08f};
      for (int64_t d = 0; d < 32; ++d) {
        store_value(want.q_elem(false, 0, 0, 0, d), dt, specials[d % 16]);
        store_value(got.q_elem(false, 0, 0, 0, d), dt, specials[d % 16]);
      }
      detail::reference_apply(want.plan);
      detail::cpu::RowJob job;
      job.plan = &got.plan;
      job.rows_per_token = 1;
      job.total_rows = 1;
      job.table_fast = true;
      detail::cpu::run_rows(job, 0, 1);
      for (int64_t d = 0; d < 32; ++d) {
        const float a = load_value(want.q_elem(true, 0, 0, 0, d), dt);
        const float b = load_value(got.q_elem(true, 0, 0, 0, d), dt);
        const std::string where = std::string(hwy::TargetName(target)) + " " + dtype_name(dt) + " channel " +
                                  std::to_string(d) + " pos " + std::to_string(c.offset);
        if (std::isnan(a) || std::isinf(a) || a == 0.0f) {
          // classes and signs must match exactly (NaN: any payload)
          EXPECT_EQ(std::isnan(a), std::isnan(b)) << where << ": want " << a << " got " << b;
          if (!std::isnan(a)) EXPECT_TRUE(std::memcmp(&a, &b, 4) == 0) << where << ": want " << a << " got " << b;
        } else {
          // finite: same value up to one output ulp (the reference may round from double, we from f32)
          const double ulp = dt == DType::kBF16 ? 0x1p-7 : dt == DType::kF16 ? 0x1p-10 : 0x1p-23;
          const double tiny = dt == DType::kF16 ? 0x1p-24 : 1e-44;
          EXPECT_LE(std::fabs(a - b), std::fabs(a) * ulp + tiny) << where << ": want " << a << " got " << b;
        }
      }
    }
  }
}

TEST(CpuKernelsBf16Test, NativeNarrowingMatchesPortableBitForBit) {
  // AVX512-BF16's VCVTNEPS2BF16 (used where the CPU has it) must give exactly the portable rounding,
  // subnormal-producing rows (which it would flush) and NaN/Inf included.
  const bool had_native = detail::cpu::set_native_bf16(true);
  if (!had_native) GTEST_SKIP() << "this CPU has no AVX512-BF16: only the portable bf16 narrowing runs here";
  for (Pairing pr : {Pairing::kHalfSplit, Pairing::kInterleaved})
    for (bool decode : {true, false}) {
      Case c;
      c.dtype = DType::kBF16;
      c.pairing = pr;
      c.S = decode ? 1 : 4; c.hq = 6; c.hk = 2;
      c.misalign = 16;  // rows on cache lines: the unpeeled path for the large call
      Fixture native(c), portable(c);  // same random inputs
      const float specials[] = {INFINITY, -INFINITY, NAN, 3.4e38f, -1e-40f, 2e-38f, -1.5e-38f, 0.f, -0.f, 1e-39f};
      for (int64_t s = 0; s < c.S; ++s)
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t d = 0; d < c.head_dim; ++d)
            for (Fixture* f : {&native, &portable}) {
              if (h == 1) {  // a whole head of tiny values: its outputs are subnormal
                const float tiny[] = {1e-39f, -2e-39f, 5e-40f, -1e-40f, 3e-38f};
                store_value(f->q_elem(false, 0, s, h, d), c.dtype, tiny[(s + d) % 5]);
              } else if (d % 7 == 0) {
                store_value(f->q_elem(false, 0, s, h, d), c.dtype, specials[(s + h + d) % 10]);
              }
            }
      detail::cpu::RowJob job;
      job.rows_per_token = c.hq + c.hk;
      job.total_rows = c.S * job.rows_per_token;
      job.table_fast = true;
      job.row_outer = !decode;
      job.plan = &native.plan;
      detail::cpu::set_native_bf16(true);
      detail::cpu::run_rows(job, 0, job.total_rows);
      job.plan = &portable.plan;
      detail::cpu::set_native_bf16(false);
      detail::cpu::run_rows(job, 0, job.total_rows);
      detail::cpu::set_native_bf16(true);
      EXPECT_TRUE(native.buf.q == portable.buf.q) << c.name() << (decode ? " decode" : " large");
      EXPECT_TRUE(native.buf.k == portable.buf.k) << c.name() << (decode ? " decode" : " large");
    }
}

TEST_F(CpuKernelsTest, Bf16PortablePathsAgreeBitForBit) {
  // Without AVX512-BF16, bf16 rows on cache lines take paths of their own (interleaved: each pair in
  // one 32-bit lane, InterleavedBF16LaneStep; half-split on x86: block-wise widening and packing,
  // HalfBF16BlockRows), misaligned rows the per-vector widening and narrowing of LoadX/StoreX. All
  // compute the same f32 values and round to nearest even, so they must agree bit for bit; ~400 000
  // values per call make rounding ties (low 16 bits 0x8000, either parity) occur several times.
  const bool native = detail::cpu::set_native_bf16(true);  // (true where the CPU has AVX512-BF16)
  detail::cpu::set_native_bf16(false);                      // AVX3 takes the portable paths too
  for (int64_t target : detail::cpu::runnable_targets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (Pairing pr : {Pairing::kHalfSplit, Pairing::kInterleaved})
    for (Direction dir : {Direction::kForward, Direction::kInverse}) {
      Case c;
      c.dtype = DType::kBF16;
      c.pairing = pr;
      c.direction = dir;
      c.S = 256; c.hq = 8; c.hk = 4; c.offset = 1000;
      c.misalign = 16;  // rows on cache lines (as in NativeNarrowingMatchesPortableBitForBit): lane pairs
      Case m = c;
      m.misalign = 1;  // rows 2 bytes further: the per-row path
      Fixture lanes(c), rows(m);
      detail::cpu::RowJob job;
      job.rows_per_token = c.hq + c.hk;
      job.total_rows = c.S * job.rows_per_token;
      job.table_fast = true;
      job.row_outer = true;
      for (Fixture* f : {&lanes, &rows}) {
        job.plan = &f->plan;
        detail::cpu::run_rows(job, 0, job.total_rows);
      }
      int64_t mismatches = 0;
      for (int64_t s = 0; s < c.S; ++s)
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t d = 0; d < c.head_dim; ++d)
            mismatches += std::memcmp(lanes.q_elem(true, 0, s, h, d), rows.q_elem(true, 0, s, h, d), 2) != 0;
      EXPECT_EQ(mismatches, 0) << hwy::TargetName(target) << " " << pairing_name(pr) << " " << direction_name(dir);
    }
  }
  detail::cpu::set_native_bf16(native);
}

TEST(CpuApplyTest, ResultsDoNotDependOnThreadCount) {
  // Large enough (~1.3 MiB moved) to be split over threads; bit-identical for 1, 2, 3 and 7 threads.
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (bool inplace : {true, false}) {
      Case c;
      c.dtype = dt;
      c.inplace = inplace;
      c.B = 2; c.S = 37; c.hq = 12; c.hk = 4; c.head_dim = 128; c.rotary_dim = 96;
      c.pairing = inplace ? Pairing::kHalfSplit : Pairing::kInterleaved;
      Fixture one(c);
      detail::cpu_apply(one.plan);
      for (int threads : {2, 3, 7}) {
        Fixture many(c);
        many.plan.threads = threads;
        detail::cpu_apply(many.plan);
        expect_same(one, many, true, "threads=" + std::to_string(threads));
      }
      Fixture ref(c);  // and the whole thing agrees with the reference
      detail::reference_apply(ref.plan);
      expect_same(ref, one, false, "cpu_apply vs reference");
    }
  }
}

TEST(CpuApplyTest, FallsBackToReferenceForF64AndChannelStrides) {
  // f64 rows and a channel stride of 2 are valid plans the SIMD path does not take: the result must
  // still be the reference's, bit for bit.
  Case c;
  c.head_dim = c.rotary_dim = 16; c.S = 2; c.hq = 2; c.hk = 0;
  Fixture want(c), got(c);
  for (Fixture* f : {&want, &got}) {
    f->plan.t[0].in_sd = f->plan.t[0].out_sd = 2;  // every other channel of a 2x wider row
    f->plan.head_dim = 8; f->plan.rotary_dim = 8; f->plan.half = 4;
  }
  detail::reference_apply(want.plan);
  detail::cpu_apply(got.plan);
  EXPECT_TRUE(want.buf.q == got.buf.q);

  std::vector<double> x = testing::randn_f64(3 * 2 * 8, 7), y = x;
  Case d;
  d.head_dim = d.rotary_dim = 8; d.S = 3; d.hq = 2; d.hk = 0;
  Fixture f64(d);
  Plan p = f64.plan;
  p.dtype = DType::kF64;
  p.t[0].in = p.t[0].out = x.data();
  p.t[0].in_sb = 48; p.t[0].in_ss = 16; p.t[0].in_sh = 8;
  p.t[0].out_sb = 48; p.t[0].out_ss = 16; p.t[0].out_sh = 8;
  detail::cpu_apply(p);
  p.t[0].in = p.t[0].out = y.data();
  detail::reference_apply(p);
  EXPECT_EQ(x, y);
}

}  // namespace
}  // namespace rotary

// Hostile inputs at the C++ API: table-driven errors (kind, argument, value, untouched inputs), out-of-range policy, concurrency.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "npy.h"
#include "rotary/rotary.h"
#include "testing/errors_doc.h"
#include "testing/shared.h"

namespace rotary {
namespace {

using K = Error::Kind;

using ::rotary::testing::doc_escape;
using ::rotary::testing::doc_row;

constexpr int64_t kBig31 = int64_t(1) << 31;
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

/// A view filled field by field: TensorView::strided itself refuses overflowing shapes, but a caller
/// can always build such a struct by hand, so the apply entry points must reject it too.
TensorView raw_view(void* data, DType dtype, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t x : shape) v.shape[i++] = x;
  i = 0;
  for (int64_t x : strides) v.strides[i++] = x;
  return v;
}

Frequencies default_freqs(int64_t rotary_dim, double base = 10000.0) {
  Spec s;
  s.head_dim = rotary_dim;
  s.base = base;
  return compute_frequencies(s);
}

/// Which C++ entry point a case goes through.
enum class Entry { kRope, kTable, kFrequencies, kCosSin };

/// A valid in-place call (q [2,3,4,8] f32 bshd, k [2,3,2,8]) that each case breaks in one way.
struct Call {
  static constexpr int64_t B = 2, S = 3, Hq = 4, Hk = 2, D = 8;
  std::vector<float> q = testing::randn(B * S * Hq * D, 11);
  std::vector<float> k = testing::randn(B * S * Hk * D, 12);
  std::vector<float> spare = std::vector<float>(B * S * Hq * D * 2, -3.0f);  // out-of-place destinations
  std::vector<int64_t> i64 = std::vector<int64_t>(32, 1);
  std::vector<int32_t> i32 = std::vector<int32_t>(32, 1);
  std::vector<float> f32 = std::vector<float>(32, 1.0f);
  std::vector<double> f64 = std::vector<double>(32, 1.0);
  std::vector<float> cos = std::vector<float>(4 * 4, 0.5f), sin = std::vector<float>(4 * 4, 0.5f);
  std::vector<uint16_t> half_bits = std::vector<uint16_t>(64, 0x3800);
  TensorView cos_v = TensorView::contiguous(cos.data(), DType::kF32, {4, 4});  // a fixed caller table: 4 positions
  TensorView sin_v = TensorView::contiguous(sin.data(), DType::kF32, {4, 4});
  Spec spec;
  RopeOptions rope_options;
  TableOptions table_options;
  Frequencies freqs = default_freqs(D);
  ApplyArgs a;
  Entry entry = Entry::kRope;

  Call() {
    spec.head_dim = D;
    spec.max_position_embeddings = 128;
    a.q = TensorView::contiguous(q.data(), DType::kF32, {B, S, Hq, D});
    a.k = TensorView::contiguous(k.data(), DType::kF32, {B, S, Hk, D});
    a.threads = 1;
  }
  void thd(int64_t T = 6) {
    a.layout = Layout::kTHD;
    a.q = TensorView::contiguous(q.data(), DType::kF32, {T, Hq, D});
    a.k = TensorView::contiguous(k.data(), DType::kF32, {T, Hk, D});
  }
  void ids_i64(std::vector<int64_t> v, std::initializer_list<int64_t> shape) {
    std::copy(v.begin(), v.end(), i64.begin());
    a.positions = Positions::from_ids(TensorView::contiguous(i64.data(), DType::kI64, shape));
  }
  /// i64 ids 0, 1, 2, ... (the token grid's size) written at `where` (memory the call may also write).
  void put_ids(float* where, std::initializer_list<int64_t> shape) {
    auto* p = reinterpret_cast<int64_t*>(where);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) p[i] = i % 3;
    a.positions = Positions::from_ids(TensorView::contiguous(p, DType::kI64, shape));
  }
  void cu_i32(std::vector<int32_t> v) {
    std::copy(v.begin(), v.end(), i32.begin());
    a.positions = Positions::packed(TensorView::contiguous(i32.data(), DType::kI32, {static_cast<int64_t>(v.size())}));
  }
  void run() {
    switch (entry) {
      case Entry::kRope: {
        Rope r(spec, rope_options);
        r.apply(a);
        break;
      }
      case Entry::kTable: {
        CosSinTable t(freqs, table_options);
        apply_table(t, a);
        break;
      }
      case Entry::kFrequencies: apply_frequencies(freqs, a); break;
      case Entry::kCosSin: apply_cos_sin(cos_v, sin_v, a); break;
    }
  }
};

struct Case {
  const char* name;
  std::function<void(Call&)> setup;
  K kind;
  std::vector<std::string> needles;  // the argument's name and the offending value
};

std::vector<Case> cases() {
  return {
      // ---- shapes vs layout
      {"bhsd q rank 3", [](Call& c) { c.a.layout = Layout::kBHSD; c.a.q = TensorView::contiguous(c.q.data(), DType::kF32, {6, 4, 8}); }, K::kInvalidArgument, {"q must have rank 4", "bhsd", "got rank 3"}},
      {"thd k rank 4", [](Call& c) { c.thd(); c.a.k = TensorView::contiguous(c.k.data(), DType::kF32, {1, 6, 2, 8}); }, K::kInvalidArgument, {"k must have rank 3", "got rank 4"}},
      {"bhsd k seq differs", [](Call& c) { c.a.layout = Layout::kBHSD; c.a.q = TensorView::contiguous(c.q.data(), DType::kF32, {2, 4, 3, 8}); c.a.k = TensorView::contiguous(c.k.data(), DType::kF32, {2, 3, 2, 8}); }, K::kInvalidArgument, {"k sequence length", "got 2"}},
      {"q head_dim below spec head_dim", [](Call& c) { c.a.q = TensorView::contiguous(c.q.data(), DType::kF32, {2, 3, 8, 4}); c.a.k = {}; }, K::kInvalidArgument, {"q head_dim must equal the spec's head_dim 8", "got 4"}},
      {"q head_dim differs from spec head_dim", [](Call& c) { c.spec.head_dim = 4; c.a.k = {}; }, K::kInvalidArgument, {"q head_dim must equal the spec's head_dim 4", "got 8"}},
      {"q rank 5 (garbage rank)", [](Call& c) { c.a.q.rank = 5; }, K::kInvalidArgument, {"q must have rank 4", "got rank 5"}},
      // ---- strides
      {"negative k stride", [](Call& c) { c.a.k.strides[3] = -1; }, K::kInvalidArgument, {"k strides must be >= 0", "-1"}},
      {"zero q stride", [](Call& c) { c.a.q.strides[2] = 0; }, K::kInvalidArgument, {"q stride of dim 2 is 0", "size is 4"}},
      {"zero q_out stride", [](Call& c) { c.a.q_out = TensorView::strided(c.spare.data(), DType::kF32, {2, 3, 4, 8}, {96, 32, 8, 0}); }, K::kInvalidArgument, {"q_out stride of dim 3 is 0"}},
      {"overlapping q_out rows", [](Call& c) { c.a.q_out = TensorView::strided(c.spare.data(), DType::kF32, {2, 3, 4, 8}, {96, 32, 5, 1}); }, K::kInvalidArgument, {"q_out elements overlap", "stride 5"}},
      // ---- aliasing that is not exactly in place
      {"q_out = q shifted by one row", [](Call& c) { c.a.q_out = TensorView::contiguous(c.q.data() + 8, DType::kF32, {2, 3, 4, 8}); }, K::kInvalidArgument, {"q_out must either be q itself"}},
      {"q_out = q with transposed strides", [](Call& c) { c.a.k = {}; c.a.q_out = TensorView::strided(c.q.data(), DType::kF32, {2, 3, 4, 8}, {96, 8, 24, 1}); }, K::kInvalidArgument, {"q_out must either be q itself"}},
      {"k_out writes over input q", [](Call& c) { c.a.k_out = TensorView::contiguous(c.q.data(), DType::kF32, {2, 3, 2, 8}); c.a.q_out = TensorView::contiguous(c.spare.data(), DType::kF32, {2, 3, 4, 8}); }, K::kInvalidArgument, {"k_out overlaps input q"}},
      {"k in place aliases q in place", [](Call& c) { c.a.k = TensorView::contiguous(c.q.data() + 16, DType::kF32, {2, 3, 2, 8}); }, K::kInvalidArgument, {"outputs for q and k overlap"}},
      // ---- outputs over the call's other inputs (positions, caller cos/sin): every input, every entry point
      {"q_out holds the ids", [](Call& c) { c.a.q_out = TensorView::contiguous(c.spare.data(), DType::kF32, {2, 3, 4, 8}); c.put_ids(c.spare.data() + 100, {3}); }, K::kInvalidArgument, {"q_out overlaps positions.ids", "before it is read"}},
      {"q in place holds the ids (table)", [](Call& c) { c.entry = Entry::kTable; c.put_ids(c.q.data() + 64, {2, 3}); }, K::kInvalidArgument, {"q (rotated in place) overlaps positions.ids"}},
      {"k_out holds the batch_offsets", [](Call& c) { c.a.k_out = TensorView::contiguous(c.spare.data() + 192, DType::kF32, {2, 3, 2, 8}); auto* bo = reinterpret_cast<int64_t*>(c.spare.data() + 200); bo[0] = 0; bo[1] = 1; c.a.positions.batch_offsets = TensorView::contiguous(bo, DType::kI64, {2}); }, K::kInvalidArgument, {"k_out overlaps positions.batch_offsets"}},
      {"q_out holds the cu_seqlens", [](Call& c) { c.thd(); c.a.q_out = TensorView::contiguous(c.spare.data(), DType::kF32, {6, 4, 8}); auto* cu = reinterpret_cast<int32_t*>(c.spare.data() + 10); cu[0] = 0; cu[1] = 6; c.a.positions = Positions::packed(TensorView::contiguous(cu, DType::kI32, {2})); }, K::kInvalidArgument, {"q_out overlaps positions.cu_seqlens"}},
      {"k in place holds the seq_offsets", [](Call& c) { c.thd(); c.cu_i32({0, 6}); auto* so = reinterpret_cast<int64_t*>(c.k.data() + 20); so[0] = 2; c.a.positions.seq_offsets = TensorView::contiguous(so, DType::kI64, {1}); }, K::kInvalidArgument, {"k (rotated in place) overlaps positions.seq_offsets"}},
      {"q_out holds the fractional ids (frequencies)", [](Call& c) { c.entry = Entry::kFrequencies; c.a.q_out = TensorView::contiguous(c.spare.data(), DType::kF32, {2, 3, 4, 8}); std::fill(c.spare.begin() + 150, c.spare.begin() + 156, 1.5f); c.a.positions = Positions::from_ids(TensorView::contiguous(c.spare.data() + 150, DType::kF32, {2, 3})); }, K::kInvalidArgument, {"q_out overlaps positions.ids"}},
      {"mrope ids [3,B,S] inside q in place", [](Call& c) { c.spec.mrope.section = {2, 1, 1}; c.put_ids(c.q.data() + 2, {3, 2, 3}); }, K::kInvalidArgument, {"q (rotated in place) overlaps positions.ids"}},
      {"q_out holds the caller cos", [](Call& c) { c.entry = Entry::kCosSin; c.a.q_out = TensorView::contiguous(c.spare.data(), DType::kF32, {2, 3, 4, 8}); std::fill(c.spare.begin() + 64, c.spare.begin() + 80, 0.5f); c.cos_v = TensorView::contiguous(c.spare.data() + 64, DType::kF32, {4, 4}); }, K::kInvalidArgument, {"q_out overlaps cos", "before it is read"}},
      {"k in place holds the caller sin", [](Call& c) { c.entry = Entry::kCosSin; std::fill(c.k.begin() + 8, c.k.begin() + 24, 0.5f); c.sin_v = TensorView::contiguous(c.k.data() + 8, DType::kF32, {4, 4}); }, K::kInvalidArgument, {"k (rotated in place) overlaps sin"}},
      // ---- dtype mismatches
      {"k f16 with q f32", [](Call& c) { c.a.k = TensorView::contiguous(c.half_bits.data(), DType::kF16, {2, 3, 2, 8}); }, K::kInvalidArgument, {"k dtype must equal q dtype f32", "f16"}},
      {"k_out bf16 with k f32", [](Call& c) { c.a.k_out = TensorView::contiguous(c.spare.data(), DType::kBF16, {2, 3, 2, 8}); }, K::kInvalidArgument, {"k_out dtype", "bf16"}},
      {"sin f16 with cos f32", [](Call& c) { c.entry = Entry::kCosSin; c.sin_v = TensorView::contiguous(c.half_bits.data(), DType::kF16, {4, 4}); }, K::kInvalidArgument, {"sin dtype must equal cos dtype f32", "f16"}},
      {"cos i64", [](Call& c) { c.entry = Entry::kCosSin; c.cos_v.dtype = DType::kI64; c.sin_v.dtype = DType::kI64; }, K::kInvalidArgument, {"cos dtype", "i64"}},
      {"q dtype out of enum", [](Call& c) { c.a.q.dtype = static_cast<DType>(42); c.a.k = {}; }, K::kInvalidArgument, {"q dtype", "42"}},
      // ---- rotary_dim / head_dim
      {"cos half-width 5 for head_dim 8", [](Call& c) { c.entry = Entry::kCosSin; c.cos_v = TensorView::contiguous(c.cos.data(), DType::kF32, {3, 5}); c.sin_v = TensorView::contiguous(c.sin.data(), DType::kF32, {3, 5}); }, K::kInvalidArgument, {"rotary_dim must be <= head_dim 8", "got 10"}},
      {"cos half-width 2^62 (2*w overflows)", [](Call& c) { c.entry = Entry::kCosSin; c.cos_v = raw_view(c.cos.data(), DType::kF32, {1, int64_t(1) << 62}, {1, 1}); c.sin_v = c.cos_v; }, K::kInvalidArgument, {"cos last dim", "4611686018427387904"}},
      {"spec rotary_dim odd", [](Call& c) { c.spec.rotary_dim = 5; }, K::kInvalidArgument, {"rotary_dim must be even", "5"}},
      {"spec ntk without factor", [](Call& c) { c.spec.scaling.type = RopeType::kNtk; }, K::kInvalidArgument, {"scaling.factor is required for rope_type ntk"}},
      {"spec ntk mixed_b nan", [](Call& c) { c.spec.scaling.type = RopeType::kNtk; c.spec.scaling.factor = 2.0; c.spec.scaling.mixed_b = std::nan(""); }, K::kInvalidArgument, {"scaling.mixed_b must be a finite number", "nan"}},
      {"spec dynamic alpha 0.5", [](Call& c) { c.spec.scaling.type = RopeType::kDynamic; c.spec.scaling.alpha = 0.5; }, K::kInvalidArgument, {"scaling.alpha must be >= 1", "0.5"}},
      // ---- positions
      {"offset negative", [](Call& c) { c.a.positions = Positions::contiguous(-1); }, K::kInvalidArgument, {"positions.offset must be >= 0", "-1"}},
      {"offset INT64_MAX", [](Call& c) { c.a.positions = Positions::contiguous(kI64Max); }, K::kOutOfRange, {"positions.offset", "9223372036854775807"}},
      {"ids i64 = 2^31", [](Call& c) { c.ids_i64({0, 1, kBig31}, {3}); }, K::kOutOfRange, {"positions.ids[2]", "2147483648"}},
      {"ids i64 = INT64_MIN", [](Call& c) { c.ids_i64({0, kI64Min, 2, 3, 4, 5}, {2, 3}); }, K::kInvalidArgument, {"positions.ids[0,1]", "-9223372036854775808"}},
      {"ids i64 = 2^40 past a fixed caller table", [](Call& c) { c.entry = Entry::kCosSin; c.ids_i64({0, 1, int64_t(1) << 40}, {3}); }, K::kOutOfRange, {"positions.ids[2]", "1099511627776"}},
      {"ids beyond fixed caller table", [](Call& c) { c.entry = Entry::kCosSin; c.ids_i64({0, 4, 1}, {3}); }, K::kOutOfRange, {"positions.ids[1] is 4,", "4 rows"}},
      {"offset beyond fixed caller table", [](Call& c) { c.entry = Entry::kCosSin; c.a.positions = Positions::contiguous(2); }, K::kOutOfRange, {"position 4", "4 rows"}},
      {"packed beyond fixed caller table", [](Call& c) { c.entry = Entry::kCosSin; c.thd(); c.cu_i32({0, 1, 6}); }, K::kOutOfRange, {"position 4", "4 rows"}},
      {"fractional NaN id", [](Call& c) { c.f32[4] = std::nanf(""); c.a.positions = Positions::from_ids(TensorView::contiguous(c.f32.data(), DType::kF32, {2, 3})); }, K::kInvalidArgument, {"positions.ids[1,1]", "nan"}},
      {"fractional -inf id", [](Call& c) { c.f64[0] = -INFINITY; c.a.positions = Positions::from_ids(TensorView::contiguous(c.f64.data(), DType::kF64, {3})); }, K::kInvalidArgument, {"positions.ids[0]", "-inf"}},
      {"fractional id 2^31", [](Call& c) { c.f64[2] = 2147483648.0; c.a.positions = Positions::from_ids(TensorView::contiguous(c.f64.data(), DType::kF64, {3})); }, K::kOutOfRange, {"positions.ids[2]", "2147483648"}},
      {"fractional ids with a caller table", [](Call& c) { c.entry = Entry::kCosSin; c.a.positions = Positions::from_ids(TensorView::contiguous(c.f64.data(), DType::kF64, {3})); }, K::kInvalidArgument, {"positions.ids", "fractional"}},
      {"batch_offsets null data", [](Call& c) { c.a.positions.batch_offsets = TensorView::contiguous(static_cast<void*>(nullptr), DType::kI64, {2}); }, K::kInvalidArgument, {"positions.batch_offsets data is null"}},
      {"batch_offsets push past 2^31", [](Call& c) { c.i64[1] = kBig31 - 2; c.a.positions.batch_offsets = TensorView::contiguous(c.i64.data(), DType::kI64, {2}); }, K::kOutOfRange, {"position 2147483648"}},
      // ---- cu_seqlens
      {"cu_seqlens not monotone", [](Call& c) { c.thd(); c.cu_i32({0, 5, 3, 6}); }, K::kInvalidArgument, {"non-decreasing", "cu_seqlens[2] = 3"}},
      {"cu_seqlens total 7 for T 6", [](Call& c) { c.thd(); c.cu_i32({0, 3, 7}); }, K::kInvalidArgument, {"positions.cu_seqlens[2]", "T = 6", "got 7"}},
      {"cu_seqlens single entry [0] for T 6", [](Call& c) { c.thd(); c.cu_i32({0}); }, K::kInvalidArgument, {"positions.cu_seqlens[0]", "T = 6", "got 0"}},
      {"cu_seqlens rank 2", [](Call& c) { c.thd(); c.a.positions = Positions::packed(TensorView::contiguous(c.i32.data(), DType::kI32, {1, 3})); }, K::kInvalidArgument, {"positions.cu_seqlens must have rank 1", "[1,3]"}},
      {"cu_seqlens empty", [](Call& c) { c.thd(); c.a.positions = Positions::packed(TensorView::contiguous(c.i32.data(), DType::kI32, {0})); }, K::kInvalidArgument, {"positions.cu_seqlens", "[0]"}},
      {"seq_offsets reach 2^31", [](Call& c) { c.thd(); c.cu_i32({0, 6}); c.i64[0] = kBig31 - 3; c.a.positions.seq_offsets = TensorView::contiguous(c.i64.data(), DType::kI64, {1}); }, K::kOutOfRange, {"sequence 0", "2147483650"}},
      // ---- M-RoPE sections
      {"mrope 2 sections", [](Call& c) { c.spec.mrope.section = {2, 2}; }, K::kInvalidArgument, {"mrope.section", "3 entries", "got 2"}},
      {"mrope negative section", [](Call& c) { c.spec.mrope.section = {-1, 3, 2}; }, K::kInvalidArgument, {"mrope.section[0]", "-1"}},
      {"mrope sections overflow int64 sum", [](Call& c) { c.spec.mrope.section = {kI64Max, kI64Max, 6}; }, K::kInvalidArgument, {"mrope.section", "9223372036854775807"}},
      {"mrope ids [3,T] with wrong T", [](Call& c) { c.spec.mrope.section = {2, 1, 1}; c.thd(); c.ids_i64(std::vector<int64_t>(15, 0), {3, 5}); }, K::kInvalidArgument, {"positions.ids", "[3,5]"}},
      {"mrope [3,S] ids ambiguous at batch 3", [](Call& c) { c.spec.mrope.section = {2, 1, 1}; c.a.k = {}; c.a.q = TensorView::contiguous(c.q.data(), DType::kF32, {3, 3, 2, 8}); c.ids_i64(std::vector<int64_t>(9, 0), {3, 3}); }, K::kInvalidArgument, {"positions.ids shape [3,3] is ambiguous", "[3,B,S] = [3,3,3]"}},
      {"mrope ids of no accepted shape", [](Call& c) { c.spec.mrope.section = {2, 1, 1}; c.ids_i64(std::vector<int64_t>(8, 0), {2, 4}); }, K::kInvalidArgument, {"positions.ids must have shape [3,B,S]", "for text-only positions", "got [2,4]"}},
      {"mrope h-axis id past table limit", [](Call& c) { c.spec.mrope.section = {2, 1, 1}; c.rope_options.mode = CosSinMode::kTable; c.rope_options.table.max_positions = 16; std::vector<int64_t> v(18, 0); v[7] = 40; c.ids_i64(v, {3, 2, 3}); }, K::kOutOfRange, {"position 40", "max_positions is 16"}},
      // ---- null pointers
      {"null q data", [](Call& c) { c.a.q.data = nullptr; }, K::kInvalidArgument, {"q data is null", "192 elements"}},
      {"null q_out data with a shape", [](Call& c) { c.a.q_out = TensorView::contiguous(static_cast<void*>(nullptr), DType::kF32, {2, 3, 4, 8}); }, K::kInvalidArgument, {"q_out data is null"}},
      {"null cos data", [](Call& c) { c.entry = Entry::kCosSin; c.sin_v.data = nullptr; }, K::kInvalidArgument, {"sin data is null"}},
      {"null cu_seqlens with a shape", [](Call& c) { c.thd(); c.a.positions = Positions::packed(TensorView::contiguous(static_cast<void*>(nullptr), DType::kI32, {3})); }, K::kInvalidArgument, {"positions.cu_seqlens data is null"}},
      // ---- byte counts that overflow int64
      {"f64 byte count overflows", [](Call& c) { c.a.k = {}; c.a.q = raw_view(c.q.data(), DType::kF64, {int64_t(1) << 29, int64_t(1) << 30, 1, 8}, {int64_t(1) << 33, 8, 8, 1}); }, K::kInvalidArgument, {"q", "overflows int64", "536870912"}},
      {"element count overflows", [](Call& c) { c.a.k = {}; c.a.q = raw_view(c.q.data(), DType::kF32, {kI64Max, 2, 1, 8}, {16, 8, 8, 1}); }, K::kInvalidArgument, {"q element count overflows int64", "9223372036854775807"}},
      {"stride extent overflows", [](Call& c) { c.a.k = {}; c.a.q.strides[0] = kI64Max; }, K::kInvalidArgument, {"q memory extent overflows int64", "9223372036854775807"}},
      // ---- table limits
      {"apply_table past max_positions", [](Call& c) { c.entry = Entry::kTable; c.table_options.max_positions = 10; c.a.positions = Positions::contiguous(8); }, K::kOutOfRange, {"position 10", "max_positions is 10"}},
      {"Rope kTable past max_positions", [](Call& c) { c.rope_options.mode = CosSinMode::kTable; c.rope_options.table.max_positions = 10; c.ids_i64({0, 1, 10}, {3}); }, K::kOutOfRange, {"position 10", "max_positions is 10"}},
      {"seq_len negative", [](Call& c) { c.a.seq_len = -5; }, K::kInvalidArgument, {"seq_len must be > 0", "-5"}},
  };
}

const char* kind_name(K k) {
  switch (k) {
    case K::kInvalidArgument: return "invalid argument";
    case K::kOutOfRange: return "out of range";
    case K::kUnsupported: return "unsupported";
    case K::kIo: return "io";
    case K::kInternal: return "internal";
  }
  return "?";
}

std::string describe(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "'" + x + "' ";
  return s;
}

TEST(HostileCpp, EveryCaseFailsWithItsKindNamesTheArgumentAndWritesNothing) {
  const auto all = cases();
  EXPECT_GE(all.size(), 40u);
  std::vector<std::string> messages;
  for (const Case& c : all) {
    SCOPED_TRACE(c.name);
    Call call;
    c.setup(call);
    const auto q0 = call.q, k0 = call.k, spare0 = call.spare;
    try {
      call.run();
      ADD_FAILURE() << "no error for " << c.name;
      continue;
    } catch (const Error& e) {
      const std::string msg = e.what();
      doc_row("C++", c.name, kind_name(e.kind()), msg);
      messages.push_back(msg);
      EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(c.kind)) << msg;
      EXPECT_EQ(msg.rfind("[rotary_", 0), 0u) << "message must start with [rotary_...]: " << msg;
      for (const auto& n : c.needles) EXPECT_NE(msg.find(n), std::string::npos) << describe(c.needles) << "\n got: " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-rotary exception: " << e.what();
    }
    EXPECT_EQ(0, std::memcmp(call.q.data(), q0.data(), q0.size() * sizeof(float))) << "q changed";
    EXPECT_EQ(0, std::memcmp(call.k.data(), k0.data(), k0.size() * sizeof(float))) << "k changed";
    EXPECT_EQ(0, std::memcmp(call.spare.data(), spare0.data(), spare0.size() * sizeof(float))) << "output changed";
  }
  // docs/errors.md lists the real messages: every message of this battery must appear there verbatim.
  const std::string doc = testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/errors.md");
  for (const auto& m : messages)
    EXPECT_NE(doc.find(doc_escape(m)), std::string::npos)
        << "docs/errors.md is out of date (regenerate with python3 scripts/gen_errors_doc.py); missing: " << m;
}

// The other entry points with outputs: ONNX's Y and Rope::cos_sin's two row buffers must not share memory with an
// input either (named with the entry point's own argument names); nothing is written when refused.
TEST(HostileCpp, EveryCaseOfAnOutputOverAnInputOfOnnxOrCosSinIsRefused) {
  const int64_t B = 1, H = 2, S = 3, D = 8;
  std::vector<float> x = testing::randn(B * H * S * D, 31);
  struct Run { const char* name; std::function<void(std::vector<float>&)> call; const char* needle; };
  auto onnx = [&](std::vector<float>& buf, int what) {  // Y = buf[0, 48); the input `what` lives at buf[16, ...)
    OnnxRotaryArgs a;
    a.x = TensorView::contiguous(x.data(), DType::kF32, {B, H, S, D});
    a.y = TensorView::contiguous(buf.data(), DType::kF32, {B, H, S, D});
    std::vector<float> table(4 * 4, 0.5f);
    std::vector<int64_t> ids = {0, 1, 2};
    a.cos_cache = TensorView::contiguous(what == 1 ? buf.data() + 16 : table.data(), DType::kF32, {4, 4});
    a.sin_cache = TensorView::contiguous(what == 2 ? buf.data() + 16 : table.data(), DType::kF32, {4, 4});
    a.position_ids = TensorView::contiguous(what == 0 ? static_cast<void*>(buf.data() + 16) : ids.data(), DType::kI64, {B, S});
    onnx_rotary_embedding(a);
  };
  Spec spec;
  spec.head_dim = D;
  Rope rope(spec);
  const std::vector<Run> runs = {
      {"onnx Y holding position_ids", [&](std::vector<float>& b) { onnx(b, 0); }, "Y overlaps position_ids"},
      {"onnx Y holding cos_cache", [&](std::vector<float>& b) { onnx(b, 1); }, "Y overlaps cos_cache"},
      {"onnx Y holding sin_cache", [&](std::vector<float>& b) { onnx(b, 2); }, "Y overlaps sin_cache"},
      {"cos_sin cos_out holding the positions", [&](std::vector<float>& b) { rope.cos_sin(TensorView::contiguous(b.data() + 4, DType::kI64, {3}), std::nullopt, b.data(), b.data() + 40); }, "cos_out overlaps positions"},
      {"cos_sin sin_out holding the positions", [&](std::vector<float>& b) { rope.cos_sin(TensorView::contiguous(b.data() + 20, DType::kI64, {3}), std::nullopt, b.data() + 40, b.data() + 16); }, "sin_out overlaps positions"},
      {"cos_sin sin_out over cos_out", [&](std::vector<float>& b) { std::vector<int64_t> p = {0, 1, 2}; rope.cos_sin(TensorView::contiguous(p.data(), DType::kI64, {3}), std::nullopt, b.data(), b.data() + 8); }, "sin_out overlaps cos_out"},
  };
  std::vector<std::string> messages;
  for (const Run& r : runs) {
    SCOPED_TRACE(r.name);
    std::vector<float> buf(64, 0.0f);  // zeros: valid i64 positions 0 and cos/sin values
    const auto before = buf;
    try {
      r.call(buf);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      doc_row("C++", r.name, kind_name(e.kind()), e.what());
      messages.push_back(e.what());
      EXPECT_EQ(e.kind(), K::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(r.needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(buf, before) << "written although refused";
  }
  const std::string doc = testing::read_file(std::string(ROTARY_SOURCE_DIR) + "/docs/errors.md");
  for (const auto& m : messages)
    EXPECT_NE(doc.find(doc_escape(m)), std::string::npos) << "docs/errors.md is out of date; missing: " << m;
}

// The overlap test is exact, element by element: ids stored in the gaps between the rows of a strided output are
// never written, so that call is accepted and equals the one with the ids elsewhere.
TEST(HostileCpp, InputsInTheGapsOfAStridedOutputAreAccepted) {
  Call ref, gap;
  ref.a.k = gap.a.k = {};
  ref.a.q_out = TensorView::contiguous(ref.spare.data(), DType::kF32, {2, 3, 4, 8});
  std::vector<int64_t> ids = {2, 0, 1};
  ref.a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {3}));
  ref.run();
  // heads 16 floats apart: floats 8..15 of each head row are never written; the ids live in the first gap
  gap.a.q_out = TensorView::strided(gap.spare.data(), DType::kF32, {2, 3, 4, 8}, {192, 64, 16, 1});
  auto* in_gap = reinterpret_cast<int64_t*>(gap.spare.data() + 8);
  std::copy(ids.begin(), ids.end(), in_gap);
  gap.a.positions = Positions::from_ids(TensorView::contiguous(in_gap, DType::kI64, {3}));
  ASSERT_NO_THROW(gap.run());
  EXPECT_TRUE(std::equal(ids.begin(), ids.end(), in_gap)) << "the ids were overwritten";
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t d = 0; d < 8; ++d)
          ASSERT_EQ(gap.spare[b * 192 + s * 64 + h * 16 + d], ref.spare[((b * 3 + s) * 4 + h) * 8 + d]);
}

TEST(HostileCpp, TheUnbrokenCallSucceedsThroughEveryEntryPoint) {
  for (Entry e : {Entry::kRope, Entry::kTable, Entry::kFrequencies, Entry::kCosSin}) {
    Call call;
    call.entry = e;
    call.a.positions = Positions::contiguous(e == Entry::kCosSin ? 0 : 5);
    if (e == Entry::kCosSin) call.a.q = TensorView::contiguous(call.q.data(), DType::kF32, {2, 3, 4, 8});
    const auto q0 = call.q;
    EXPECT_NO_THROW(call.run());
    EXPECT_NE(call.q, q0);
  }
}

// An empty call (zero heads) over a huge token grid does nothing: no O(B*S) scan, no allocation, no overflow.
TEST(HostileCpp, EmptyCallsOverHugeTokenGridsAreCheapNoOps) {
  float dummy[8] = {0};
  const auto t0 = std::chrono::steady_clock::now();
  {
    Spec s;
    s.head_dim = 8;
    Rope rope(s);
    ApplyArgs a;
    a.q = raw_view(dummy, DType::kF32, {int64_t(1) << 40, int64_t(1) << 22, 0, 8}, {0, 0, 0, 1});
    EXPECT_NO_THROW(rope.apply(a));
    // Broadcast ids [S] (stride 0) over the huge grid.
    int64_t zero = 0;
    a.q = raw_view(dummy, DType::kF32, {1, int64_t(1) << 40, 0, 8}, {0, 0, 0, 1});
    a.positions = Positions::from_ids(raw_view(&zero, DType::kI64, {int64_t(1) << 40}, {0}));
    EXPECT_NO_THROW(rope.apply(a));
    // Packed: cu_seqlens [0, T] with T = 2^40 tokens of zero heads.
    int64_t cu[2] = {0, int64_t(1) << 40};
    ApplyArgs p;
    p.layout = Layout::kTHD;
    p.q = raw_view(dummy, DType::kF32, {int64_t(1) << 40, 0, 8}, {0, 0, 1});
    p.positions = Positions::packed(TensorView::contiguous(cu, DType::kI64, {2}));
    EXPECT_NO_THROW(rope.apply(p));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 60.0) << "empty calls must not scan the token grid";  // generous: a scan of 2^40 never ends
}

// Fuzz regression (fuzz/corpus/npy/regression-zero-dim-huge-dims.npy): a zero dim next to huge dims made
// the element count / strides overflow (UB) in NpyArray::numel() and NpyArray::view().
TEST(HostileNpy, EmptyArraysWithHugeDimsNeverOverflow) {
  auto header = [](const std::string& shape) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }\n";
    std::string out("\x93NUMPY\x01\x00", 8);
    out += static_cast<char>(dict.size() & 0xff);
    out += static_cast<char>(dict.size() >> 8);
    return out + dict;
  };
  NpyArray a = npy_parse(header("(1, 2, 444444444424, 4444444442, 44444444444244, 44444440, 0, 44444)"));
  EXPECT_EQ(a.numel(), 0);
  EXPECT_TRUE(a.data.empty());
  EXPECT_THROW(a.view(), Error);  // rank 8
  NpyArray b = npy_parse(header("(0, 4444444442, 4444444442, 8)"));
  EXPECT_EQ(b.numel(), 0);
  try {
    (void)b.view();
    ADD_FAILURE() << "strides overflow must be reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), K::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("4444444442"), std::string::npos) << e.what();
  }
  // A view that does not overflow but whose element count does is rejected by apply, not rotated.
  NpyArray c = npy_parse(header("(4444444442, 4444444442, 0, 8)"));
  TensorView v = c.view();
  Spec s;
  s.head_dim = 8;
  Rope rope(s);
  ApplyArgs args;
  args.q = v;
  EXPECT_THROW(rope.apply(args), Error);
}

// ---------------------------------------------------------------- defined out-of-range behaviour

std::vector<float> rotate_copy(const std::function<void(ApplyArgs&)>& apply, const std::vector<int64_t>& ids,
                               int64_t D) {
  const int64_t S = static_cast<int64_t>(ids.size());
  std::vector<float> x = testing::randn(static_cast<size_t>(S * 2 * D), 77);
  ApplyArgs a;
  a.q = TensorView::contiguous(x.data(), DType::kF32, {1, S, 2, D});
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {S}));
  a.threads = 1;
  apply(a);
  return x;
}

TEST(HostileOutOfRange, GrowableTableGrowsUpToItsMaximumThenErrorsWithoutChangingAnything) {
  const int64_t D = 16;
  const Frequencies f = default_freqs(D);
  TableOptions o;
  o.max_positions = 1000;
  CosSinTable table(f, o);
  // Growth up to the last allowed position, values identical to on-the-fly computation.
  const std::vector<int64_t> ok_ids = {3, 999, 500};
  const auto via_table = rotate_copy([&](ApplyArgs& a) { apply_table(table, a); }, ok_ids, D);
  const auto via_fly = rotate_copy([&](ApplyArgs& a) { apply_frequencies(f, a); }, ok_ids, D);
  EXPECT_EQ(via_table, via_fly);
  EXPECT_EQ(table.size(), 1000);
  // One past the maximum: kOutOfRange naming the position and the limit; table and tensor untouched.
  const std::vector<int64_t> bad_ids = {1, 1000, 2};
  std::vector<float> x = testing::randn(static_cast<size_t>(3 * 2 * D), 5), x0 = x;
  ApplyArgs a;
  a.q = TensorView::contiguous(x.data(), DType::kF32, {1, 3, 2, D});
  a.positions = Positions::from_ids(TensorView::contiguous(bad_ids.data(), DType::kI64, {3}));
  try {
    apply_table(table, a);
    ADD_FAILURE() << "no error past max_positions";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), K::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("position 1000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_positions is 1000"), std::string::npos) << e.what();
  }
  EXPECT_EQ(x, x0);
  EXPECT_EQ(table.size(), 1000);
  EXPECT_THROW(table.ensure(1001), Error);
}

TEST(HostileOutOfRange, RopeAutoFallsBackToOnTheFlyBeyondTheTableAndTableModeErrors) {
  Spec s;
  s.head_dim = 16;
  s.max_position_embeddings = 64;
  const Frequencies f = compute_frequencies(s);
  const std::vector<int64_t> ids = {0, 31, 32, 1000, (int64_t(1) << 31) - 1};
  RopeOptions autoo;
  autoo.table.max_positions = 32;
  Rope rope_auto(s, autoo);
  const auto got = rotate_copy([&](ApplyArgs& a) { rope_auto.apply(a); }, ids, 16);
  const auto want = rotate_copy([&](ApplyArgs& a) { apply_frequencies(f, a); }, ids, 16);
  EXPECT_EQ(got, want) << "kAuto beyond the table must equal exact on-the-fly rotation, never identity";
  EXPECT_LE(rope_auto.table().size(), 32);
  const auto identity = rotate_copy([](ApplyArgs&) {}, ids, 16);
  EXPECT_NE(got, identity);

  RopeOptions table_only = autoo;
  table_only.mode = CosSinMode::kTable;
  Rope rope_table(s, table_only);
  std::vector<float> x = testing::randn(5 * 2 * 16, 9), x0 = x;
  ApplyArgs a;
  a.q = TensorView::contiguous(x.data(), DType::kF32, {1, 5, 2, 16});
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {5}));
  try {
    rope_table.apply(a);
    ADD_FAILURE() << "kTable past max_positions must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), K::kOutOfRange) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_positions is 32"), std::string::npos) << e.what();
  }
  EXPECT_EQ(x, x0);
}

TEST(HostileOutOfRange, CallerTablesNeverReturnIdentityPastTheirRows) {
  // Rows for positions 0..3; a token at position 4 must be an error whatever the position source.
  const int64_t D = 8, half = 4, rows = 4;
  std::vector<float> cosv(rows * half), sinv(rows * half);
  const Frequencies f = default_freqs(D);
  for (int64_t p = 0; p < rows; ++p) compute_cos_sin_row(f, static_cast<double>(p), &cosv[p * half], &sinv[p * half]);
  const TensorView cv = TensorView::contiguous(cosv.data(), DType::kF32, {rows, half});
  const TensorView sv = TensorView::contiguous(sinv.data(), DType::kF32, {rows, half});
  std::vector<float> x = testing::randn(5 * D, 3), x0 = x;
  ApplyArgs a;
  a.q = TensorView::contiguous(x.data(), DType::kF32, {1, 5, 1, D});
  EXPECT_THROW(apply_cos_sin(cv, sv, a), Error);  // offset 0 + 5 tokens -> position 4
  std::vector<int64_t> ids = {0, 1, 2, 3, 4};
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {5}));
  EXPECT_THROW(apply_cos_sin(cv, sv, a), Error);
  a.layout = Layout::kTHD;
  a.q = TensorView::contiguous(x.data(), DType::kF32, {5, 1, D});
  std::vector<int32_t> cu = {0, 5};
  a.positions = Positions::packed(TensorView::contiguous(cu.data(), DType::kI32, {2}));
  EXPECT_THROW(apply_cos_sin(cv, sv, a), Error);
  EXPECT_EQ(x, x0);
  // In range, the same call agrees with the library's own frequencies exactly.
  ids = {3, 0, 2, 1, 3};
  a.layout = Layout::kBSHD;
  a.q = TensorView::contiguous(x.data(), DType::kF32, {1, 5, 1, D});
  a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {5}));
  ASSERT_NO_THROW(apply_cos_sin(cv, sv, a));
  std::vector<float> y = x0;
  a.q.data = y.data();
  apply_frequencies(f, a);
  EXPECT_EQ(x, y);
}

// ---------------------------------------------------------------- concurrency

// Many threads share one Rope (every mode) while its table grows; results equal the single-threaded ones.
TEST(HostileConcurrency, SharedRopeGrowingUnderManyThreadsMatchesSingleThreaded) {
  constexpr int kThreads = 6, kIters = 6;
  const int64_t D = 32, S = 4;
  Spec s;
  s.head_dim = D;
  s.max_position_embeddings = 4096;
  auto ids_of = [](int th, int it) {
    const int64_t p = 97 * it * it * (th + 1) + 13 * th;
    return std::vector<int64_t>{p, p + 1, p / 2, 3 * p + 7};
  };
  auto input = [&](int th, int it) { return testing::randn(static_cast<size_t>(S * 2 * D), static_cast<uint64_t>(th * 100 + it)); };
  for (CosSinMode mode : {CosSinMode::kAuto, CosSinMode::kTable, CosSinMode::kOnTheFly}) {
    SCOPED_TRACE(static_cast<int>(mode));
    RopeOptions o;
    o.mode = mode;
    o.table.max_positions = int64_t(1) << 18;
    auto run = [&](Rope& rope, int th, int it) {
      std::vector<float> x = input(th, it);
      const auto ids = ids_of(th, it);
      ApplyArgs a;
      a.q = TensorView::contiguous(x.data(), DType::kF32, {1, S, 2, D});
      a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {S}));
      a.threads = (th % 2) ? 1 : 2;  // some calls also use the shared thread pool
      rope.apply(a);
      return x;
    };
    std::vector<std::vector<float>> want(kThreads * kIters), got(kThreads * kIters);
    {
      Rope single(s, o);
      for (int th = 0; th < kThreads; ++th)
        for (int it = 0; it < kIters; ++it) want[th * kIters + it] = run(single, th, it);
    }
    Rope shared(s, o);
    std::atomic<int> go{0};
    std::vector<std::thread> pool;
    for (int th = 0; th < kThreads; ++th)
      pool.emplace_back([&, th] {
        while (go.load() == 0) std::this_thread::yield();
        for (int it = 0; it < kIters; ++it) got[th * kIters + it] = run(shared, th, it);
      });
    go.store(1);
    for (auto& t : pool) t.join();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "call " << i;
  }
}

// Threads hitting the table limit concurrently: each failing call throws kOutOfRange, succeeding ones are exact.
TEST(HostileConcurrency, ConcurrentCallsAtTheTableLimitFailCleanly) {
  const int64_t D = 16;
  const Frequencies f = default_freqs(D);
  TableOptions o;
  o.max_positions = 3000;
  CosSinTable table(f, o);
  std::atomic<int> errors{0}, mismatches{0};
  std::vector<std::thread> pool;
  for (int th = 0; th < 6; ++th)
    pool.emplace_back([&, th] {
      for (int it = 0; it < 20; ++it) {
        const int64_t p = (th * 20 + it) * 29;  // up to 3451: some past the limit
        std::vector<float> x = testing::randn(2 * D, static_cast<uint64_t>(p)), y = x;
        ApplyArgs a;
        a.q = TensorView::contiguous(x.data(), DType::kF32, {1, 1, 2, D});
        a.positions = Positions::contiguous(p);
        a.threads = 1;
        try {
          apply_table(table, a);
        } catch (const Error& e) {
          if (e.kind() == K::kOutOfRange && p >= 3000 && x == y) errors.fetch_add(1);
          else mismatches.fetch_add(1);
          continue;
        }
        a.q.data = y.data();
        apply_frequencies(f, a);
        if (p >= 3000 || x != y) mismatches.fetch_add(1);
      }
    });
  for (auto& t : pool) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  int expected_errors = 0;
  for (int i = 0; i < 120; ++i) expected_errors += (i * 29 >= 3000);
  EXPECT_EQ(errors.load(), expected_errors);
}

}  // namespace
}  // namespace rotary

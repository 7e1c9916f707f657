// Hostile inputs at the C++ engine boundary: each case asserts the error kind, the named argument, and untouched tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/test_tensors.h"
#include "rotary/rotary.h"

namespace rotary {
namespace {

using K = Error::Kind;
enum class Via { kFrequencies, kTable, kCallerCosSin, kRope };

/// A valid in-place call (q [2,3,4,8], k [2,3,2,8], f32, bshd, rotary_dim 8) that each case breaks.
struct Fx {
  static constexpr int64_t B = 2, S = 3, Hq = 4, Hk = 2, D = 8;
  std::vector<float> q = testing::randn(B * S * Hq * D, 1);
  std::vector<float> k = testing::randn(B * S * Hk * D, 2);
  std::vector<float> out = std::vector<float>(B * S * Hq * D * 2, 7.0f);
  std::vector<int64_t> i64 = std::vector<int64_t>(16, 0), i64b = std::vector<int64_t>(16, 0);
  std::vector<int32_t> i32 = std::vector<int32_t>(16, 0);
  std::vector<double> f64 = std::vector<double>(16, 0.0);
  std::vector<float> cos = std::vector<float>(64 * 4, 0.5f), sin = std::vector<float>(64 * 4, 0.5f);
  std::vector<uint16_t> h16 = std::vector<uint16_t>(B * S * Hk * D, 0);
  ApplyArgs a;
  Via via = Via::kFrequencies;
  Frequencies freqs = enginetest::to_frequencies(enginetest::truth_theta(10000.0L, D));
  TableOptions table_options;
  TensorView cos_v = TensorView::contiguous(cos.data(), DType::kF32, {64, 4});
  TensorView sin_v = TensorView::contiguous(sin.data(), DType::kF32, {64, 4});
  Spec spec;
  RopeOptions rope_options;

  Fx() {
    a.q = TensorView::contiguous(q.data(), DType::kF32, {B, S, Hq, D});
    a.k = TensorView::contiguous(k.data(), DType::kF32, {B, S, Hk, D});
    spec.head_dim = D;
    spec.base = 10000.0;
    spec.max_position_embeddings = 4096;
  }
  /// Switches to a packed thd call with T = 6 tokens.
  void thd() {
    a.layout = Layout::kTHD;
    a.q = TensorView::contiguous(q.data(), DType::kF32, {6, Hq, D});
    a.k = TensorView::contiguous(k.data(), DType::kF32, {6, Hk, D});
  }
  void packed(std::vector<int64_t> cu) {
    thd();
    for (std::size_t i = 0; i < cu.size(); ++i) i64[i] = cu[i];
    a.positions = Positions::packed(TensorView::contiguous(i64.data(), DType::kI64, {static_cast<int64_t>(cu.size())}));
  }
  void run() {
    switch (via) {
      case Via::kFrequencies: apply_frequencies(freqs, a); break;
      case Via::kTable: {
        CosSinTable t(freqs, table_options);
        apply_table(t, a);
        break;
      }
      case Via::kCallerCosSin: apply_cos_sin(cos_v, sin_v, a); break;
      case Via::kRope: {
        Rope r(spec, rope_options);
        r.apply(a);
        break;
      }
    }
  }
};

struct HostileCase {
  const char* name;
  std::function<void(Fx&)> setup;
  K kind;
  std::vector<std::string> needles;  // the argument name and the offending value
};

std::vector<HostileCase> cases() {
  const int64_t big = int64_t(1) << 31;
  return {
      {"q rank vs bshd", [](Fx& f) { f.a.q = TensorView::contiguous(f.q.data(), DType::kF32, {6, 4, 8}); }, K::kInvalidArgument, {"q must have rank 4", "got rank 3"}},
      {"q rank vs thd", [](Fx& f) { f.a.layout = Layout::kTHD; }, K::kInvalidArgument, {"q must have rank 3", "got rank 4"}},
      {"q integer dtype", [](Fx& f) { f.a.q.dtype = DType::kI32; f.a.k = {}; }, K::kInvalidArgument, {"q dtype", "i32"}},
      {"k dtype differs", [](Fx& f) { f.a.k = TensorView::contiguous(f.h16.data(), DType::kF16, {2, 3, 2, 8}); }, K::kInvalidArgument, {"k dtype", "f16"}},
      {"k batch differs", [](Fx& f) { f.a.k = TensorView::contiguous(f.k.data(), DType::kF32, {1, 3, 2, 8}); }, K::kInvalidArgument, {"k batch", "got 1"}},
      {"k seq differs", [](Fx& f) { f.a.k = TensorView::contiguous(f.k.data(), DType::kF32, {2, 2, 2, 8}); }, K::kInvalidArgument, {"k sequence length", "got 2"}},
      {"k head_dim differs", [](Fx& f) { f.a.k = TensorView::contiguous(f.k.data(), DType::kF32, {2, 3, 4, 4}); }, K::kInvalidArgument, {"k head_dim", "got 4"}},
      {"rotary_dim > head_dim", [](Fx& f) { f.freqs = enginetest::to_frequencies(enginetest::truth_theta(10000.0L, 16)); }, K::kInvalidArgument, {"rotary_dim must be <= head_dim 8", "got 16"}},
      {"rotary_dim odd (spec)", [](Fx& f) { f.via = Via::kRope; f.spec.rotary_dim = 7; }, K::kInvalidArgument, {"rotary_dim", "7"}},
      {"negative shape", [](Fx& f) { f.a.q.shape[1] = -3; }, K::kInvalidArgument, {"q shape[1] must be >= 0", "-3"}},
      {"negative stride", [](Fx& f) { f.a.q.strides[2] = -8; }, K::kInvalidArgument, {"q strides must be >= 0", "-8"}},
      {"zero stride on size>1 dim", [](Fx& f) { f.a.k.strides[1] = 0; }, K::kInvalidArgument, {"k stride of dim 1 is 0", "size is 3"}},
      {"null q data", [](Fx& f) { f.a.q.data = nullptr; }, K::kInvalidArgument, {"q data is null", "192 elements"}},
      {"null k data", [](Fx& f) { f.a.k.data = nullptr; }, K::kInvalidArgument, {"k data is null", "96 elements"}},
      {"k_out without k", [](Fx& f) { f.a.k_out = f.a.k; f.a.k = {}; }, K::kInvalidArgument, {"k_out is given but k is absent"}},
      {"q_out shape", [](Fx& f) { f.a.q_out = TensorView::contiguous(f.out.data(), DType::kF32, {2, 3, 4, 4}); }, K::kInvalidArgument, {"q_out shape", "[2,3,4,4]"}},
      {"q_out dtype", [](Fx& f) { f.a.q_out = TensorView::contiguous(f.out.data(), DType::kF64, {2, 3, 4, 8}); }, K::kInvalidArgument, {"q_out dtype", "f64"}},
      {"q_out rows overlap", [](Fx& f) { f.a.q_out = TensorView::strided(f.out.data(), DType::kF32, {2, 3, 4, 8}, {96, 32, 4, 1}); }, K::kInvalidArgument, {"q_out elements overlap", "stride 4"}},
      {"in-place q with overlapping rows", [](Fx& f) { f.a.q = TensorView::strided(f.q.data(), DType::kF32, {2, 3, 4, 8}, {96, 32, 6, 1}); }, K::kInvalidArgument, {"q (rotated in place) elements overlap"}},
      {"q_out partially overlaps q", [](Fx& f) { f.a.q_out = TensorView::contiguous(f.q.data() + 1, DType::kF32, {2, 3, 4, 8}); }, K::kInvalidArgument, {"q_out must either be q itself"}},
      {"q_out same memory other strides", [](Fx& f) { f.a.q_out = TensorView::strided(f.q.data(), DType::kF32, {2, 3, 4, 8}, {96, 8, 24, 1}); }, K::kInvalidArgument, {"q_out must either be q itself"}},
      {"k_out partially overlaps k", [](Fx& f) { f.a.k_out = TensorView::contiguous(f.k.data() + 3, DType::kF32, {2, 3, 2, 8}); }, K::kInvalidArgument, {"k_out must either be k itself"}},
      {"q and k outputs alias", [](Fx& f) { f.a.k = TensorView::contiguous(f.q.data(), DType::kF32, {2, 3, 2, 8}); }, K::kInvalidArgument, {"outputs for q and k overlap"}},
      {"q_out overlaps input k", [](Fx& f) { f.a.q_out = TensorView::contiguous(f.k.data(), DType::kF32, {2, 3, 2, 8}); f.a.q = TensorView::contiguous(f.q.data(), DType::kF32, {2, 3, 2, 8}); f.a.k_out = TensorView::contiguous(f.out.data(), DType::kF32, {2, 3, 2, 8}); }, K::kInvalidArgument, {"q_out overlaps input k"}},
      {"negative offset", [](Fx& f) { f.a.positions = Positions::contiguous(-4); }, K::kInvalidArgument, {"positions.offset must be >= 0", "-4"}},
      {"offset >= 2^31", [big](Fx& f) { f.a.positions = Positions::contiguous(big); }, K::kOutOfRange, {"positions.offset", "2147483648"}},
      {"offset + S reaches 2^31", [big](Fx& f) { f.a.positions = Positions::contiguous(big - 2); }, K::kOutOfRange, {"position 2147483648"}},
      {"batch_offsets length", [](Fx& f) { f.a.positions.batch_offsets = TensorView::contiguous(f.i64.data(), DType::kI64, {3}); }, K::kInvalidArgument, {"positions.batch_offsets", "[3]"}},
      {"batch_offsets negative", [](Fx& f) { f.i64[1] = -9; f.a.positions.batch_offsets = TensorView::contiguous(f.i64.data(), DType::kI64, {2}); }, K::kInvalidArgument, {"positions.batch_offsets[1]", "-9"}},
      {"batch_offsets dtype", [](Fx& f) { f.a.positions.batch_offsets = TensorView::contiguous(f.f64.data(), DType::kF64, {2}); }, K::kInvalidArgument, {"positions.batch_offsets dtype", "f64"}},
      {"ids absent", [](Fx& f) { f.a.positions.kind = Positions::Kind::kIds; }, K::kInvalidArgument, {"positions.ids must be given"}},
      {"ids dtype f16", [](Fx& f) { f.a.positions = Positions::from_ids(TensorView::contiguous(f.h16.data(), DType::kF16, {2, 3})); }, K::kInvalidArgument, {"positions.ids dtype", "f16"}},
      {"ids shape", [](Fx& f) { f.a.positions = Positions::from_ids(TensorView::contiguous(f.i64.data(), DType::kI64, {3, 2})); }, K::kInvalidArgument, {"positions.ids shape [3,2]"}},
      {"ids null data", [](Fx& f) { f.a.positions = Positions::from_ids(TensorView::contiguous(static_cast<void*>(nullptr), DType::kI64, {2, 3})); }, K::kInvalidArgument, {"positions.ids data is null"}},
      {"ids negative", [](Fx& f) { f.i64[5] = -5; f.a.positions = Positions::from_ids(TensorView::contiguous(f.i64.data(), DType::kI64, {2, 3})); }, K::kInvalidArgument, {"positions.ids[1,2]", "-5"}},
      {"ids i32 negative broadcast", [](Fx& f) { f.i32[1] = -1; f.a.positions = Positions::from_ids(TensorView::contiguous(f.i32.data(), DType::kI32, {3})); }, K::kInvalidArgument, {"positions.ids[1]", "-1"}},
      {"ids >= 2^31", [big](Fx& f) { f.i64[1] = big; f.a.positions = Positions::from_ids(TensorView::contiguous(f.i64.data(), DType::kI64, {2, 3})); }, K::kOutOfRange, {"positions.ids[0,1]", "2147483648"}},
      {"fractional ids with a table", [](Fx& f) { f.via = Via::kTable; f.a.positions = Positions::from_ids(TensorView::contiguous(f.f64.data(), DType::kF64, {2, 3})); }, K::kInvalidArgument, {"positions.ids", "fractional"}},
      {"fractional ids NaN", [](Fx& f) { f.f64[0] = std::nan(""); f.a.positions = Positions::from_ids(TensorView::contiguous(f.f64.data(), DType::kF64, {2, 3})); }, K::kInvalidArgument, {"positions.ids[0,0]", "nan"}},
      {"fractional ids inf", [](Fx& f) { f.f64[4] = INFINITY; f.a.positions = Positions::from_ids(TensorView::contiguous(f.f64.data(), DType::kF64, {2, 3})); }, K::kInvalidArgument, {"positions.ids[1,1]", "inf"}},
      {"fractional ids negative", [](Fx& f) { f.f64[2] = -0.5; f.a.positions = Positions::from_ids(TensorView::contiguous(f.f64.data(), DType::kF64, {2, 3})); }, K::kInvalidArgument, {"positions.ids[0,2]", "-0.5"}},
      {"packed with bshd", [](Fx& f) { f.a.positions = Positions::packed(TensorView::contiguous(f.i64.data(), DType::kI64, {2})); }, K::kInvalidArgument, {"requires layout thd", "bshd"}},
      {"cu_seqlens absent", [](Fx& f) { f.thd(); f.a.positions.kind = Positions::Kind::kPacked; }, K::kInvalidArgument, {"positions.cu_seqlens must be given"}},
      {"cu_seqlens[0] != 0", [](Fx& f) { f.packed({1, 3, 6}); }, K::kInvalidArgument, {"positions.cu_seqlens[0] must be 0", "got 1"}},
      {"cu_seqlens decreasing", [](Fx& f) { f.packed({0, 4, 2, 6}); }, K::kInvalidArgument, {"non-decreasing", "cu_seqlens[2] = 2"}},
      {"cu_seqlens last != T", [](Fx& f) { f.packed({0, 2, 5}); }, K::kInvalidArgument, {"positions.cu_seqlens[2]", "T = 6", "got 5"}},
      {"cu_seqlens dtype", [](Fx& f) { f.thd(); f.a.positions = Positions::packed(TensorView::contiguous(f.f64.data(), DType::kF64, {2})); }, K::kInvalidArgument, {"positions.cu_seqlens dtype", "f64"}},
      {"seq_offsets length", [](Fx& f) { f.packed({0, 2, 6}); f.a.positions.seq_offsets = TensorView::contiguous(f.i64b.data(), DType::kI64, {3}); }, K::kInvalidArgument, {"positions.seq_offsets", "[3]"}},
      {"seq_offsets negative", [](Fx& f) { f.packed({0, 2, 6}); f.i64b[1] = -2; f.a.positions.seq_offsets = TensorView::contiguous(f.i64b.data(), DType::kI64, {2}); }, K::kInvalidArgument, {"positions.seq_offsets[1]", "-2"}},
      {"cos rank 1", [](Fx& f) { f.via = Via::kCallerCosSin; f.cos_v = TensorView::contiguous(f.cos.data(), DType::kF32, {4}); }, K::kInvalidArgument, {"cos must have rank 2", "got rank 1"}},
      {"cos/sin shapes differ", [](Fx& f) { f.via = Via::kCallerCosSin; f.sin_v = TensorView::contiguous(f.sin.data(), DType::kF32, {32, 4}); }, K::kInvalidArgument, {"sin shape", "[32,4]"}},
      {"cos integer dtype", [](Fx& f) { f.via = Via::kCallerCosSin; f.cos_v.dtype = DType::kI32; f.sin_v.dtype = DType::kI32; }, K::kInvalidArgument, {"cos dtype", "i32"}},
      {"sin dtype differs", [](Fx& f) { f.via = Via::kCallerCosSin; f.sin_v = TensorView::contiguous(f.f64.data(), DType::kF64, {4, 4}); f.cos_v = TensorView::contiguous(f.cos.data(), DType::kF32, {4, 4}); }, K::kInvalidArgument, {"sin dtype", "f64"}},
      {"position beyond caller cos", [](Fx& f) { f.via = Via::kCallerCosSin; f.a.positions = Positions::contiguous(62); }, K::kOutOfRange, {"position 64", "64 rows"}},
      {"caller id beyond cos rows", [](Fx& f) { f.via = Via::kCallerCosSin; f.i64[3] = 70; f.a.positions = Positions::from_ids(TensorView::contiguous(f.i64.data(), DType::kI64, {2, 3})); }, K::kOutOfRange, {"positions.ids[1,0] is 70", "64 rows"}},
      {"gathered cos with ids", [](Fx& f) { f.via = Via::kCallerCosSin; f.cos_v = TensorView::contiguous(f.cos.data(), DType::kF32, {2, 3, 4}); f.sin_v = TensorView::contiguous(f.sin.data(), DType::kF32, {2, 3, 4}); f.a.positions = Positions::from_ids(TensorView::contiguous(f.i64.data(), DType::kI64, {2, 3})); }, K::kInvalidArgument, {"positions must be the default", "ids"}},
      {"gathered cos wrong shape", [](Fx& f) { f.via = Via::kCallerCosSin; f.cos_v = TensorView::contiguous(f.cos.data(), DType::kF32, {2, 5, 4}); f.sin_v = TensorView::contiguous(f.sin.data(), DType::kF32, {2, 5, 4}); }, K::kInvalidArgument, {"cos shape must be [B,S,R/2] = [2,3,4]", "[2,5,4]"}},
      {"positions.kind out of enum", [](Fx& f) { f.a.positions.kind = static_cast<Positions::Kind>(7); }, K::kInvalidArgument, {"positions.kind", "7"}},
      {"k_out dtype", [](Fx& f) { f.a.k_out = TensorView::contiguous(f.out.data(), DType::kF64, {2, 3, 2, 8}); }, K::kInvalidArgument, {"k_out dtype", "f64"}},
      {"k_out rows overlap", [](Fx& f) { f.a.k_out = TensorView::strided(f.out.data(), DType::kF32, {2, 3, 2, 8}, {48, 16, 0, 1}); }, K::kInvalidArgument, {"k_out stride of dim 2 is 0"}},
      {"k_out heads overlap", [](Fx& f) { f.a.k_out = TensorView::strided(f.out.data(), DType::kF32, {2, 3, 2, 8}, {48, 16, 7, 1}); }, K::kInvalidArgument, {"k_out elements overlap", "stride 7"}},
      {"gathered cos with offset", [](Fx& f) { f.via = Via::kCallerCosSin; f.cos_v = TensorView::contiguous(f.cos.data(), DType::kF32, {2, 3, 4}); f.sin_v = TensorView::contiguous(f.sin.data(), DType::kF32, {2, 3, 4}); f.a.positions = Positions::contiguous(5); }, K::kInvalidArgument, {"positions must be the default", "offset 5"}},
      {"cos last dim 0", [](Fx& f) { f.via = Via::kCallerCosSin; f.cos_v = TensorView::contiguous(f.cos.data(), DType::kF32, {4, 0}); }, K::kInvalidArgument, {"cos last dim", "got 0"}},
      {"cos null data", [](Fx& f) { f.via = Via::kCallerCosSin; f.cos_v.data = nullptr; }, K::kInvalidArgument, {"cos data is null"}},
      {"Rope mode out of enum", [](Fx& f) { f.via = Via::kRope; f.rope_options.mode = static_cast<CosSinMode>(4); }, K::kInvalidArgument, {"options.mode", "4"}},
      {"M-RoPE sections do not sum to R/2", [](Fx& f) { f.via = Via::kRope; f.spec.mrope.section = {2, 1, 2}; }, K::kInvalidArgument, {"mrope.section", "4", "5"}},
      {"ids mrope wrong leading dim", [](Fx& f) { f.via = Via::kRope; f.spec.mrope.section = {2, 1, 1}; f.a.positions = Positions::from_ids(TensorView::contiguous(f.i64.data(), DType::kI64, {2, 2, 3})); }, K::kInvalidArgument, {"positions.ids must have shape [3,B,S]", "[2,2,3]"}},
      {"threads negative", [](Fx& f) { f.a.threads = -2; }, K::kInvalidArgument, {"threads must be >= 0", "-2"}},
      {"layout out of enum", [](Fx& f) { f.a.layout = static_cast<Layout>(9); }, K::kInvalidArgument, {"layout", "9"}},
      {"pairing out of enum", [](Fx& f) { f.a.pairing = static_cast<Pairing>(5); }, K::kInvalidArgument, {"pairing", "5"}},
      {"direction out of enum", [](Fx& f) { f.a.direction = static_cast<Direction>(-1); }, K::kInvalidArgument, {"direction", "-1"}},
      {"backend out of enum", [](Fx& f) { f.a.backend = static_cast<Backend>(8); }, K::kInvalidArgument, {"backend", "8"}},
      {"cuda without CUDA", [](Fx& f) { f.a.backend = Backend::kCuda; }, K::kUnsupported, {"cuda", "without CUDA"}},
      {"table past max_positions", [](Fx& f) { f.via = Via::kTable; f.table_options.max_positions = 100; f.a.positions = Positions::contiguous(98); }, K::kOutOfRange, {"position 100", "max_positions is 100"}},
      {"freqs empty", [](Fx& f) { f.freqs.inv_freq.clear(); }, K::kInvalidArgument, {"freqs.inv_freq must not be empty"}},
      {"freqs NaN", [](Fx& f) { f.freqs.inv_freq[2] = std::nan(""); }, K::kInvalidArgument, {"freqs.inv_freq[2]", "nan"}},
      {"attention factor inf", [](Fx& f) { f.freqs.attention_factor = INFINITY; }, K::kInvalidArgument, {"freqs.attention_factor", "inf"}},
      // Finite but past f32 (every cos/sin inf), or not > 0: what Spec::validate refuses of a spec's.
      {"attention factor past f32", [](Fx& f) { f.freqs.attention_factor = 1e39; }, K::kInvalidArgument, {"freqs.attention_factor", "f32 maximum", "1e+39"}},
      {"attention factor negative", [](Fx& f) { f.freqs.attention_factor = -1.0; }, K::kInvalidArgument, {"freqs.attention_factor", "> 0", "got -1"}},
      // A field of another positions kind would be ignored (an engine that forgot to set kind): refused.
      {"ids with kind offset", [](Fx& f) { f.a.positions.ids = TensorView::contiguous(f.i64.data(), DType::kI64, {2, 3}); }, K::kInvalidArgument, {"positions.ids is given but positions.kind is offset"}},
      {"cu_seqlens with kind offset", [](Fx& f) { f.a.positions.cu_seqlens = TensorView::contiguous(f.i64.data(), DType::kI64, {3}); }, K::kInvalidArgument, {"positions.cu_seqlens is given but positions.kind is offset"}},
      {"offset with kind ids", [](Fx& f) { f.a.positions = Positions::from_ids(TensorView::contiguous(f.i64.data(), DType::kI64, {2, 3})); f.a.positions.offset = 7; }, K::kInvalidArgument, {"positions.offset is given but positions.kind is ids"}},
      {"batch_offsets with kind ids", [](Fx& f) { f.a.positions = Positions::from_ids(TensorView::contiguous(f.i64.data(), DType::kI64, {2, 3})); f.a.positions.batch_offsets = TensorView::contiguous(f.i64b.data(), DType::kI64, {2}); }, K::kInvalidArgument, {"positions.batch_offsets is given but positions.kind is ids"}},
      {"ids with kind packed", [](Fx& f) { f.packed({0, 2, 6}); f.a.positions.ids = TensorView::contiguous(f.i64b.data(), DType::kI64, {6}); }, K::kInvalidArgument, {"positions.ids is given but positions.kind is packed"}},
      {"seq_offsets with kind offset", [](Fx& f) { f.a.positions.seq_offsets = TensorView::contiguous(f.i64b.data(), DType::kI64, {2}); }, K::kInvalidArgument, {"positions.seq_offsets is given but positions.kind is offset"}},
      {"byte size overflow", [](Fx& f) { f.a.k = {}; f.a.q.shape[0] = int64_t(1) << 40; f.a.q.shape[1] = int64_t(1) << 20; f.a.q.strides[0] = int64_t(1) << 25; }, K::kInvalidArgument, {"q", "overflows int64"}},
      {"seq_len non-positive", [](Fx& f) { f.a.seq_len = 0; }, K::kInvalidArgument, {"seq_len must be > 0", "got 0"}},
      {"M-RoPE ids need 3 axes (or one)", [](Fx& f) { f.via = Via::kRope; f.spec.mrope.section = {2, 1, 1}; f.a.positions = Positions::from_ids(TensorView::contiguous(f.i64.data(), DType::kI64, {2, 2})); }, K::kInvalidArgument, {"positions.ids must have shape [3,B,S]", "[2,2]"}},
      {"Rope table mode with fractional ids", [](Fx& f) { f.via = Via::kRope; f.rope_options.mode = CosSinMode::kTable; f.a.positions = Positions::from_ids(TensorView::contiguous(f.f64.data(), DType::kF64, {2, 3})); }, K::kInvalidArgument, {"positions.ids", "fractional"}},
      {"Rope table mode past the limit", [](Fx& f) { f.via = Via::kRope; f.rope_options.mode = CosSinMode::kTable; f.rope_options.table.max_positions = 50; f.a.positions = Positions::contiguous(60); }, K::kOutOfRange, {"position 62", "max_positions is 50"}},
  };
}

TEST(Validation, HostileBattery) {
  const auto all = cases();
  EXPECT_GE(all.size(), 60u);
  for (const HostileCase& c : all) {
    SCOPED_TRACE(c.name);
    Fx f;
    c.setup(f);
    const auto q0 = f.q, k0 = f.k, out0 = f.out;
    try {
      f.run();
      ADD_FAILURE() << "no error thrown";
      continue;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(c.kind)) << msg;
      EXPECT_EQ(msg.rfind("[rotary_", 0), 0u) << "message must start with [where]: " << msg;
      for (const auto& n : c.needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-rotary exception: " << e.what();
    }
    // Nothing half-written: validation happens before any write.
    EXPECT_EQ(f.q, q0);
    EXPECT_EQ(f.k, k0);
    EXPECT_EQ(f.out, out0);
  }
}

TEST(Validation, TheBaseCallIsValid) {
  // Sanity: the fixture itself passes every source, so each hostile case fails for its own reason.
  for (Via via : {Via::kFrequencies, Via::kTable, Via::kCallerCosSin, Via::kRope}) {
    Fx f;
    f.via = via;
    const auto q0 = f.q;
    EXPECT_NO_THROW(f.run());
    EXPECT_NE(f.q, q0);
  }
}

TEST(Validation, ExactAliasingRulesAcceptDisjointInterleavedViews) {
  // q and k interleaved in one fused buffer (element-disjoint, byte ranges interleaved) are accepted,
  // in place and written out of place into another fused buffer.
  const int64_t S = 3, D = 8, W = 3 * D;
  std::vector<float> fused = testing::randn(S * W, 3), fused_out(S * W, 0.0f);
  ApplyArgs a;
  a.q = TensorView::strided(fused.data(), DType::kF32, {1, S, 2, D}, {S * W, W, D, 1});
  a.k = TensorView::strided(fused.data() + 2 * D, DType::kF32, {1, S, 1, D}, {S * W, W, D, 1});
  const Frequencies f = enginetest::to_frequencies(enginetest::truth_theta(10000.0L, D));
  EXPECT_NO_THROW(apply_frequencies(f, a));
  a.q_out = TensorView::strided(fused_out.data(), DType::kF32, {1, S, 2, D}, {S * W, W, D, 1});
  a.k_out = TensorView::strided(fused_out.data() + 2 * D, DType::kF32, {1, S, 1, D}, {S * W, W, D, 1});
  EXPECT_NO_THROW(apply_frequencies(f, a));
  // Shifting k_out by one element either way makes it share elements with q_out: rejected, nothing written.
  const std::vector<float> before = fused_out;
  for (int64_t shift : {-1, 1}) {
    a.k_out.data = fused_out.data() + 2 * D + shift;
    a.k_out.shape[1] = S - 1;  // stay inside the buffer
    a.k.shape[1] = a.q.shape[1] = a.q_out.shape[1] = S - 1;
    EXPECT_THROW(apply_frequencies(f, a), Error) << "shift " << shift;
  }
  EXPECT_EQ(fused_out, before);
}

}  // namespace
}  // namespace rotary

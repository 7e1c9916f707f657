// The CUDA backend's test matrix: scenarios (layout, memory form, dims, positions, cos/sin source) and one call built per case.
//
// Shared by the emulator tests (every CI run) and the real-device tests (device_test.cc, on a GPU). A case
// is built from deterministic values, so building it twice gives byte-identical buffers: one copy goes
// through the reference backend, the other through backend cuda, and fixture.h compares them.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/fixture.h"
#include "rotary/apply.h"
#include "rotary/multimodal.h"

namespace rotary::testing {

enum class Pos { kOffset, kOffset0, kBatchOffsets, kIds, kIdsBroadcast, kFracIds, kPacked, kAxes3, kAxes2 };
enum class Src { kTable, kTableShort, kOnTheFly, kCaller2, kCaller2F64Strided, kCaller3, kCaller3Broadcast, kAxes, kRopeMrope };
enum class Out { kInPlace, kOutOfPlace, kQInPlaceKOut };

struct Scenario {
  std::string name;
  Layout layout = Layout::kBSHD;
  int64_t B = 2, S = 5, hq = 3, hk = 2, D = 128, R = 128;
  Mem mem = Mem::kContiguous;
  Pos pos = Pos::kOffset;
  Src src = Src::kTable;
  int64_t offset = 7;
};

inline constexpr int64_t kRows = 64;  // table/cos rows covering every position used below (ids < 60)

inline std::vector<Scenario> scenarios() {
  std::vector<Scenario> v;
  auto add = [&](Scenario s) { v.push_back(s); };
  add({"bshd offset table", Layout::kBSHD, 2, 5, 3, 2, 128, 128, Mem::kContiguous, Pos::kOffset, Src::kTable});
  add({"bshd partial table", Layout::kBSHD, 2, 5, 3, 2, 128, 64, Mem::kContiguous, Pos::kOffset, Src::kTable});
  add({"bhsd ids table", Layout::kBHSD, 2, 5, 3, 2, 128, 128, Mem::kContiguous, Pos::kIds, Src::kTable});
  add({"thd packed table", Layout::kTHD, 1, 7, 3, 2, 64, 64, Mem::kContiguous, Pos::kPacked, Src::kTable});
  add({"thd fused ids table", Layout::kTHD, 1, 7, 4, 2, 128, 128, Mem::kFusedQKV, Pos::kIds, Src::kTable});
  add({"bshd fused batch-offsets table", Layout::kBSHD, 2, 5, 3, 1, 40, 24, Mem::kFusedQKV, Pos::kBatchOffsets, Src::kTable});
  add({"bshd padded broadcast-ids partial-chunk", Layout::kBSHD, 2, 5, 3, 2, 20, 20, Mem::kPadded, Pos::kIdsBroadcast, Src::kTable});
  add({"bshd channel-strided ids odd half", Layout::kBSHD, 2, 5, 3, 2, 18, 10, Mem::kChannelStrided, Pos::kIds, Src::kTable});
  add({"bhsd misaligned offset table", Layout::kBHSD, 2, 5, 3, 2, 64, 64, Mem::kMisaligned, Pos::kOffset, Src::kTable});
  add({"bshd ids rows computed on device", Layout::kBSHD, 2, 5, 3, 2, 128, 128, Mem::kContiguous, Pos::kIds, Src::kTableShort});
  add({"thd packed rows computed on device", Layout::kTHD, 1, 7, 3, 2, 40, 24, Mem::kPadded, Pos::kPacked, Src::kTableShort});
  add({"bshd fractional ids on the fly", Layout::kBSHD, 2, 5, 3, 2, 128, 64, Mem::kContiguous, Pos::kFracIds, Src::kOnTheFly});
  add({"bhsd padded offset on the fly", Layout::kBHSD, 2, 5, 3, 2, 40, 40, Mem::kPadded, Pos::kOffset, Src::kOnTheFly});
  add({"thd fused packed on the fly", Layout::kTHD, 1, 7, 3, 2, 64, 48, Mem::kFusedQKV, Pos::kPacked, Src::kOnTheFly});
  add({"bshd ids caller rank 2", Layout::kBSHD, 2, 5, 3, 2, 128, 128, Mem::kContiguous, Pos::kIds, Src::kCaller2});
  add({"bshd strided batch-offsets caller f64", Layout::kBSHD, 2, 5, 3, 2, 40, 24, Mem::kChannelStrided, Pos::kBatchOffsets, Src::kCaller2F64Strided});
  add({"bhsd caller rank 3 broadcast", Layout::kBHSD, 2, 5, 3, 2, 64, 64, Mem::kContiguous, Pos::kOffset0, Src::kCaller3Broadcast});
  add({"bshd caller rank 3", Layout::kBSHD, 2, 5, 3, 2, 20, 20, Mem::kContiguous, Pos::kOffset0, Src::kCaller3});
  add({"bshd mrope axes on the fly", Layout::kBSHD, 2, 5, 3, 2, 128, 128, Mem::kContiguous, Pos::kAxes3, Src::kAxes});
  add({"thd vision axes on the fly", Layout::kTHD, 1, 7, 3, 2, 64, 64, Mem::kPadded, Pos::kAxes2, Src::kAxes});
  add({"bshd Rope mrope table", Layout::kBSHD, 2, 5, 3, 2, 128, 128, Mem::kContiguous, Pos::kAxes3, Src::kRopeMrope});
  add({"bshd q only", Layout::kBSHD, 2, 5, 3, 0, 128, 128, Mem::kContiguous, Pos::kOffset, Src::kTable});
  add({"decode llama-3-8b", Layout::kBSHD, 1, 1, 32, 8, 128, 128, Mem::kContiguous, Pos::kOffset, Src::kTable, 1234});
  add({"one head of 8200 channels (threads loop over chunks)", Layout::kBSHD, 1, 1, 1, 0, 8200, 8200, Mem::kContiguous, Pos::kOffset, Src::kTable});
  return v;
}

struct Built {
  std::vector<std::unique_ptr<Storage>> st;
  std::vector<std::vector<unsigned char>> mask;  // per storage: rotated output bytes
  ApplyArgs args;
  TensorView cos, sin;
};

inline Storage& new_storage(Built& b, std::size_t bytes) {
  b.st.push_back(std::make_unique<Storage>(bytes));
  b.mask.emplace_back();
  return *b.st.back();
}

inline TensorView tensor(Built& bt, const Scenario& sc, DType dt, int64_t H, Storage* shared, int64_t head_at) {
  testing::ViewSpec v{sc.layout, sc.B, sc.S, H, sc.D, sc.mem, sc.hq + 2 * sc.hk, head_at};
  if (shared) return testing::layout_view(v, dt, shared);
  std::size_t need = 0;
  testing::layout_view(v, dt, nullptr, &need);
  return testing::layout_view(v, dt, &new_storage(bt, need));
}

inline TensorView int_tensor(Built& bt, DType dt, std::initializer_list<int64_t> shape, const std::vector<double>& values) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Storage& s = new_storage(bt, static_cast<std::size_t>(n + 8) * dtype_size(dt));
  for (int64_t i = 0; i < n; ++i) testing::put(s.p, dt, i, values[static_cast<std::size_t>(i)]);
  return TensorView::contiguous(s.p, dt, shape);
}

inline double id_value(int a, int64_t b, int64_t s) { return static_cast<double>((a * 5 + b * 7 + s * 13 + 3) % 60); }

inline Built build(const Scenario& sc, DType dt, Out out, const Frequencies& f) {
  Built bt;
  ApplyArgs& a = bt.args;
  a.layout = sc.layout;
  const bool fused = sc.mem == Mem::kFusedQKV;
  Storage* shared = nullptr;
  if (fused) {
    testing::ViewSpec v{sc.layout, sc.B, sc.S, sc.hq, sc.D, sc.mem, sc.hq + 2 * sc.hk, 0};
    std::size_t need = 0;
    testing::layout_view(v, dt, nullptr, &need);
    shared = &new_storage(bt, need);
  }
  const std::size_t q_st = bt.st.size() - (fused ? 1 : 0);
  a.q = tensor(bt, sc, dt, sc.hq, shared, 0);
  const std::size_t k_st = fused ? q_st : bt.st.size();
  if (sc.hk > 0) a.k = tensor(bt, sc, dt, sc.hk, shared, sc.hq);
  // inputs: N(0,1) in every element of the views
  const std::vector<float> r = testing::randn(static_cast<std::size_t>(sc.B * sc.S * (sc.hq + sc.hk) * sc.D), 99);
  std::size_t n = 0;
  for (const TensorView* t : {&a.q, &a.k}) {
    if (!t->present()) continue;
    const int64_t H = t == &a.q ? sc.hq : sc.hk;
    for (int64_t b = 0; b < sc.B; ++b)
      for (int64_t s = 0; s < sc.S; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < sc.D; ++d)
            testing::put(t->data, dt, testing::elem_offset(*t, sc.layout, b, s, h, d), r[n++]);
  }
  // outputs
  const Scenario plain = [&] { Scenario p = sc; p.mem = sc.mem == Mem::kFusedQKV ? Mem::kPadded : sc.mem; return p; }();
  auto rotated = [&](std::size_t si, const TensorView& t, int64_t H) {
    auto& m = bt.mask[si];
    if (m.empty()) m.assign(bt.st[si]->bytes, 0);
    testing::mark_rotated(m, *bt.st[si], t, sc.layout, sc.B, sc.S, H, sc.R);
  };
  if (out == Out::kInPlace || out == Out::kQInPlaceKOut) {
    rotated(q_st, a.q, sc.hq);
  } else {
    a.q_out = tensor(bt, plain, dt, sc.hq, nullptr, 0);
    rotated(bt.st.size() - 1, a.q_out, sc.hq);
  }
  if (sc.hk > 0) {
    if (out == Out::kInPlace) {
      rotated(k_st, a.k, sc.hk);
    } else {
      a.k_out = tensor(bt, plain, dt, sc.hk, nullptr, 0);
      rotated(bt.st.size() - 1, a.k_out, sc.hk);
    }
  }
  // positions
  const bool thd = sc.layout == Layout::kTHD;
  std::vector<double> ids;
  switch (sc.pos) {
    case Pos::kOffset: a.positions = Positions::contiguous(sc.offset); break;
    case Pos::kOffset0: a.positions = Positions::contiguous(0); break;
    case Pos::kBatchOffsets:
      a.positions = Positions::contiguous(3);
      a.positions.batch_offsets = int_tensor(bt, DType::kI32, {sc.B}, {0, 11, 22, 33});
      break;
    case Pos::kIds:
    case Pos::kFracIds:
      for (int64_t b = 0; b < sc.B; ++b)
        for (int64_t s = 0; s < sc.S; ++s) ids.push_back(id_value(0, b, s) + (sc.pos == Pos::kFracIds ? 0.37 : 0.0));
      a.positions = Positions::from_ids(
          thd ? int_tensor(bt, DType::kI64, {sc.S}, ids)
              : int_tensor(bt, sc.pos == Pos::kFracIds ? DType::kF64 : DType::kI64, {sc.B, sc.S}, ids));
      break;
    case Pos::kIdsBroadcast:
      for (int64_t s = 0; s < sc.S; ++s) ids.push_back(id_value(1, 0, s));
      a.positions = Positions::from_ids(int_tensor(bt, DType::kI32, {sc.S}, ids));
      break;
    case Pos::kPacked:  // sequences [0, 2), [2, 2) (empty), [2, T)
      a.positions = Positions::packed(int_tensor(bt, DType::kI32, {4}, {0, 2, 2, static_cast<double>(sc.S)}),
                                      int_tensor(bt, DType::kI64, {3}, {5, 50, 40}));
      break;
    case Pos::kAxes3:
    case Pos::kAxes2: {
      const int axes = sc.pos == Pos::kAxes3 ? 3 : 2;
      for (int x = 0; x < axes; ++x)
        for (int64_t b = 0; b < sc.B; ++b)
          for (int64_t s = 0; s < sc.S; ++s) ids.push_back(id_value(x, b, s));
      a.positions = Positions::from_ids(thd ? int_tensor(bt, DType::kI64, {axes, sc.S}, ids)
                                            : int_tensor(bt, DType::kI64, {axes, sc.B, sc.S}, ids));
      break;
    }
  }
  // caller cos/sin
  const int64_t h = sc.R / 2;
  auto caller = [&](DType cdt, bool strided, std::initializer_list<int64_t> lead, bool by_position) {
    int64_t rows = 1;
    for (int64_t d : lead) rows *= d;
    const int64_t sd = strided ? 2 : 1;
    for (int which = 0; which < 2; ++which) {
      Storage& s = new_storage(bt, static_cast<std::size_t>(rows * h * sd + 8) * dtype_size(cdt));
      for (int64_t row = 0; row < rows; ++row)
        for (int64_t j = 0; j < h; ++j) {
          const double p = by_position ? static_cast<double>(row) : static_cast<double>(row % sc.S) + 0.5 * (row / sc.S);
          const double ang = p * f.inv_freq[static_cast<std::size_t>(j)];
          testing::put(s.p, cdt, (row * h + j) * sd, 0.9 * (which == 0 ? std::cos(ang) : std::sin(ang)));
        }
      TensorView v;
      v.data = s.p;
      v.dtype = cdt;
      v.rank = static_cast<int>(lead.size()) + 1;
      int i = 0;
      for (int64_t d : lead) v.shape[i++] = d;
      v.shape[i] = h;
      int64_t acc = sd;
      for (int k = v.rank - 1; k >= 0; --k) {
        v.strides[k] = acc;
        acc *= v.shape[k];
      }
      (which == 0 ? bt.cos : bt.sin) = v;
    }
  };
  switch (sc.src) {
    case Src::kCaller2: caller(dt, false, {kRows}, true); break;
    case Src::kCaller2F64Strided: caller(DType::kF64, true, {kRows}, true); break;
    case Src::kCaller3: caller(dt, false, {sc.B, sc.S}, false); break;
    case Src::kCaller3Broadcast: caller(dt, false, {1, sc.S}, false); break;
    default: break;
  }
  return bt;
}

inline Frequencies freqs_for(int64_t R) {
  Frequencies f;
  for (int64_t j = 0; j < R / 2; ++j) f.inv_freq.push_back(std::pow(10000.0, -2.0 * static_cast<double>(j) / R));
  f.attention_factor = 0.9;
  return f;
}

inline bool positions_on_device_unknown(Pos p) { return p != Pos::kOffset && p != Pos::kOffset0; }

inline void run(const Scenario& sc, Built& bt, const Frequencies& f, CosSinTable& table) {
  ApplyArgs& a = bt.args;
  if (a.backend == Backend::kCuda && sc.src != Src::kTableShort && positions_on_device_unknown(sc.pos))
    a.seq_len = kRows;  // the device table's rows: the engine cannot see device positions
  switch (sc.src) {
    case Src::kTable:
    case Src::kTableShort: apply_table(table, a); return;
    case Src::kOnTheFly: apply_frequencies(f, a); return;
    case Src::kCaller2:
    case Src::kCaller2F64Strided:
    case Src::kCaller3:
    case Src::kCaller3Broadcast: apply_cos_sin(bt.cos, bt.sin, a); return;
    case Src::kAxes: {
      AxisFrequencies af;
      af.freqs = f;
      af.n_axes = sc.pos == Pos::kAxes3 ? 3 : 2;
      for (int64_t j = 0; j < sc.R / 2; ++j) af.axis_of_freq.push_back(static_cast<uint8_t>((j * 7 / 3) % af.n_axes));
      apply_axes(af, a);
      return;
    }
    case Src::kRopeMrope: {
      Spec spec;
      spec.head_dim = sc.D;
      spec.rotary_dim = sc.R;
      const int64_t h = sc.R / 2;
      spec.mrope.section = {h / 4, h / 4, h - 2 * (h / 4)};
      Rope rope(spec);
      rope.apply(a);
      return;
    }
  }
}

}  // namespace rotary::testing

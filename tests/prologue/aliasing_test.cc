// Memory the prologue may share: caches as slices of one buffer's rows, and q and k when both are only read.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "prologue/prologue_testing.h"

namespace rotary {
namespace {

using testing::Buf;

/// Strided view of `rows` rows of `width` elements, `pitch` elements apart, starting `first` elements in:
/// [rows / bs, bs, 1, width] (a paged NHD cache with one kv head).
TensorView columns(Buf& b, int64_t rows, int64_t bs, int64_t pitch, int64_t first, int64_t width) {
  TensorView v = TensorView::contiguous(static_cast<unsigned char*>(b.data()) + first * dtype_size(b.dtype), b.dtype,
                                        {rows / bs, bs, 1, width});
  v.strides[0] = bs * pitch;
  v.strides[1] = pitch;
  v.strides[2] = width;
  v.strides[3] = 1;
  return v;
}

// vLLM's MLA cache keeps the latent (written as v here) and the rotated rope part (k) in one row
// [..., L + P]; any two column ranges of one row buffer that do not meet are disjoint caches.
TEST(PrologueAliasing, CachesAsDisjointColumnsOfOneRowBufferAreWrittenAsSeparateCachesWouldBe) {
  const int64_t T = 3, NB = 2, BS = 4, P = 8;
  Spec spec;
  spec.head_dim = P;
  Rope rope(spec);
  std::vector<int64_t> slots = {0, 5, 6};
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int64_t L : {int64_t(16), int64_t(8), int64_t(4)})
      for (bool k_first : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " L " + std::to_string(L) + (k_first ? " k first" : " v first"));
        Buf k(dt, T * P, 11), v(dt, T * L, 12);
        const int64_t pitch = L + P + 2;  // two padding columns at the end of each row
        Buf shared(dt, NB * BS * pitch, 13), ks(dt, NB * BS * P), vs(dt, NB * BS * L);
        const Buf pristine = shared;
        PrologueArgs a;
        a.k = k.view({T, 1, P});
        a.v = v.view({T, 1, L});
        a.positions = Positions::contiguous(10);
        a.sources = {{&rope, std::nullopt}};
        a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
        a.threads = 1;
        a.k_cache = columns(shared, NB * BS, BS, pitch, k_first ? 0 : L, P);
        a.v_cache = columns(shared, NB * BS, BS, pitch, k_first ? P : 0, L);
        prologue(a);  // refused before: "k_cache must not share memory with v_cache"
        PrologueArgs b = a;
        b.k_cache = ks.view({NB, BS, 1, P});
        b.v_cache = vs.view({NB, BS, 1, L});
        prologue(b);
        for (int64_t row = 0; row < NB * BS; ++row) {
          const bool written = row == 0 || row == 5 || row == 6;
          for (int64_t c = 0; c < pitch; ++c) {
            const int64_t i = row * pitch + c, kc = k_first ? c : c - L, vc = k_first ? c - P : c;
            double want = pristine.at(i);
            if (written && kc >= 0 && kc < P) want = ks.at(row * P + kc);
            else if (written && vc >= 0 && vc < L) want = vs.at(row * L + vc);
            ASSERT_EQ(shared.at(i), want) << "row " << row << " column " << c;
          }
        }
      }
}

// An int8 cache row and its f32 scale packed after it in one arena ([..., P int8 | 4-byte scale] per row), and
// a cache one element wide: one element per row, so each view's "row" is a single element.
TEST(PrologueAliasing, AnInt8RowAndItsScaleInOneArenaAndOneElementWideCachesAreAccepted) {
  const int64_t T = 3, NB = 2, BS = 4, P = 8, pitch = P + 4;
  Spec spec;
  spec.head_dim = P;
  Rope rope(spec);
  std::vector<int64_t> slots = {0, 5, 6};
  Buf k(DType::kF32, T * P, 21), v(DType::kF32, T * P, 22);
  std::vector<unsigned char> arena(static_cast<size_t>(NB * BS * pitch) + 16, 0x5A);
  unsigned char* base = arena.data() + (16 - reinterpret_cast<uintptr_t>(arena.data()) % 16) % 16;
  Buf vc(DType::kI8, NB * BS * P), vs(DType::kF32, NB * BS), kc2(DType::kI8, NB * BS * P), ks2(DType::kF32, NB * BS),
      vc2(DType::kI8, NB * BS * P), vs2(DType::kF32, NB * BS);
  PrologueArgs a;
  a.k = k.view({T, 1, P});
  a.v = v.view({T, 1, P});
  a.positions = Positions::contiguous(4);
  a.sources = {{&rope, std::nullopt}};
  a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
  a.threads = 1;
  a.k_cache = TensorView::contiguous(base, DType::kI8, {NB, BS, 1, P});
  a.k_cache.strides[0] = BS * pitch;
  a.k_cache.strides[1] = pitch;
  a.k_cache.strides[2] = pitch;
  a.k_scale = TensorView::contiguous(base + P, DType::kF32, {NB, BS, 1});
  a.k_scale.strides[0] = BS * pitch / 4;
  a.k_scale.strides[1] = pitch / 4;
  a.k_scale.strides[2] = pitch / 4;
  a.v_cache = vc.view({NB, BS, 1, P});
  a.v_scale = vs.view({NB, BS, 1});
  prologue(a);  // refused before: "k_cache must not share memory with k_scale"
  PrologueArgs b = a;
  b.k_cache = kc2.view({NB, BS, 1, P});
  b.k_scale = ks2.view({NB, BS, 1});
  b.v_cache = vc2.view({NB, BS, 1, P});
  b.v_scale = vs2.view({NB, BS, 1});
  prologue(b);
  for (int64_t row = 0; row < NB * BS; ++row) {
    const bool written = row == 0 || row == 5 || row == 6;
    for (int64_t c = 0; c < P; ++c)
      EXPECT_EQ(base[row * pitch + c], written ? kc2.bytes[static_cast<size_t>(row * P + c)] : 0x5A) << row << " " << c;
    float scale;
    std::memcpy(&scale, base + row * pitch + P, 4);
    if (written) EXPECT_EQ(scale, static_cast<float>(ks2.at(row)));
  }

  // v one element wide beside a k of P: [..., P | 1] rows
  Buf shared(DType::kF32, NB * BS * (P + 1)), ks(DType::kF32, NB * BS * P), vs1(DType::kF32, NB * BS), v1(DType::kF32, T, 23);
  PrologueArgs c;
  c.k = k.view({T, 1, P});
  c.v = v1.view({T, 1, 1});
  c.positions = a.positions;
  c.sources = a.sources;
  c.slot_mapping = a.slot_mapping;
  c.threads = 1;
  auto cols = [&](int64_t first, int64_t width) {
    TensorView t = TensorView::contiguous(static_cast<float*>(shared.data()) + first, DType::kF32, {NB, BS, 1, width});
    t.strides[0] = BS * (P + 1);
    t.strides[1] = P + 1;
    t.strides[2] = P + 1;
    return t;
  };
  c.k_cache = cols(0, P);
  c.v_cache = cols(P, 1);
  prologue(c);  // refused before: the one-element v rows were taken as one row wider than the pitch
  PrologueArgs e = c;
  e.k_cache = ks.view({NB, BS, 1, P});
  e.v_cache = vs1.view({NB, BS, 1, 1});
  prologue(e);
  for (int64_t s : slots) {
    for (int64_t j = 0; j < P; ++j) EXPECT_EQ(shared.at(s * (P + 1) + j), ks.at(s * P + j));
    EXPECT_EQ(shared.at(s * (P + 1) + P), vs1.at(s));
  }
}

TEST(PrologueAliasing, CachesWhoseColumnsMeetAreStillRefused) {
  const int64_t T = 3, P = 8, L = 8, pitch = 16;
  Spec spec;
  spec.head_dim = P;
  Rope rope(spec);
  std::vector<int64_t> slots = {0, 5, 6};
  Buf k(DType::kF32, T * P, 1), v(DType::kF32, T * L, 2), shared(DType::kF32, 8 * pitch + 1, 3);
  const Buf pristine = shared;
  PrologueArgs a;
  a.k = k.view({T, 1, P});
  a.v = v.view({T, 1, L});
  a.sources = {{&rope, std::nullopt}};
  a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
  a.v_cache = columns(shared, 8, 4, pitch, 0, L);
  a.k_cache = columns(shared, 8, 4, pitch, L - 1, P);  // shares column L - 1 with v_cache
  try {
    prologue(a);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[rotary_prologue] k_cache must not share memory with v_cache"), std::string::npos) << e.what();
  }
  EXPECT_EQ(shared.bytes, pristine.bytes);
}

// With a cache, k is only read (its rotated rows go to k_cache): q and k may be one buffer when q is written
// to q_out; rotating q in place would change k before it is read, so that stays refused.
TEST(PrologueAliasing, QAndKMayShareMemoryWhenNeitherIsWritten) {
  const int64_t T = 3, D = 8;
  Spec spec;
  spec.head_dim = D;
  Rope rope(spec);
  std::vector<int64_t> slots = {0, 1, 2};
  Buf x(DType::kF32, T * D, 1), v(DType::kF32, T * D, 2), qo(DType::kF32, T * D), kc(DType::kF32, 4 * D),
      vc(DType::kF32, 4 * D), qo2(DType::kF32, T * D), kc2(DType::kF32, 4 * D), vc2(DType::kF32, 4 * D);
  Buf kcopy = x;
  PrologueArgs a;
  a.q = x.view({T, 1, D});
  a.q_out = qo.view({T, 1, D});
  a.k = x.view({T, 1, D});
  a.v = v.view({T, 1, D});
  a.positions = Positions::contiguous(3);
  a.sources = {{&rope, std::nullopt}};
  a.k_cache = kc.view({4, 1, 1, D});
  a.v_cache = vc.view({4, 1, 1, D});
  a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
  a.threads = 1;
  prologue(a);  // refused before: "k (rotated in place) overlaps input q"
  PrologueArgs b = a;
  b.k = kcopy.view({T, 1, D});
  b.q_out = qo2.view({T, 1, D});
  b.k_cache = kc2.view({4, 1, 1, D});
  b.v_cache = vc2.view({4, 1, 1, D});
  prologue(b);
  EXPECT_EQ(qo.bytes, qo2.bytes);
  EXPECT_EQ(kc.bytes, kc2.bytes);
  EXPECT_EQ(vc.bytes, vc2.bytes);

  PrologueArgs c = a;
  c.q_out = {};  // q in place over k's memory
  const Buf before = x;
  try {
    prologue(c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[rotary_prologue] q (rotated in place) overlaps input k"), std::string::npos) << e.what();
  }
  EXPECT_EQ(x.bytes, before.bytes);
}

// Without q, with a cache: k is the apply plan's only tensor and is only read, so what else is only read (here
// the position ids, stored inside k's buffer) may share its memory.
TEST(PrologueAliasing, WithoutQKAndWhatIsOnlyReadMayShareMemory) {
  const int64_t T = 3, D = 8;
  Spec spec;
  spec.head_dim = D;
  Rope rope(spec);
  std::vector<int64_t> slots = {0, 1, 2};
  Buf buf(DType::kF32, T * D, 31), v(DType::kF32, T * D, 32), kc(DType::kF32, 4 * D), vc(DType::kF32, 4 * D),
      kc2(DType::kF32, 4 * D), vc2(DType::kF32, 4 * D);
  const int32_t ids[T] = {2, 7, 1};
  std::memcpy(buf.data(), ids, sizeof ids);  // the first three floats of k hold the ids' bits
  Buf kcopy = buf;
  std::vector<int32_t> ids_copy(ids, ids + T);
  PrologueArgs a;
  a.k = buf.view({T, 1, D});
  a.v = v.view({T, 1, D});
  a.positions = Positions::from_ids(TensorView::contiguous(buf.data(), DType::kI32, {T}));
  a.sources = {{&rope, std::nullopt}};
  a.k_cache = kc.view({4, 1, 1, D});
  a.v_cache = vc.view({4, 1, 1, D});
  a.slot_mapping = TensorView::contiguous(slots.data(), DType::kI64, {T});
  a.threads = 1;
  prologue(a);  // refused before: "k (rotated in place) overlaps positions.ids"
  PrologueArgs b = a;
  b.k = kcopy.view({T, 1, D});
  b.positions = Positions::from_ids(TensorView::contiguous(ids_copy.data(), DType::kI32, {T}));
  b.k_cache = kc2.view({4, 1, 1, D});
  b.v_cache = vc2.view({4, 1, 1, D});
  prologue(b);
  EXPECT_EQ(kc.bytes, kc2.bytes);
  EXPECT_EQ(vc.bytes, vc2.bytes);
  EXPECT_EQ(buf.bytes, kcopy.bytes);  // k is not written
}

}  // namespace
}  // namespace rotary

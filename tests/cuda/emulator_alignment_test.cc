// CUDA backend on the host grid emulator: pointers not aligned to their element size are refused before any launch.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuda/emulator.h"
#include "cuda/matrix.h"

namespace rotary {
namespace {

using namespace rotary::testing;  // NOLINT: the matrix vocabulary

/// The first 16-byte aligned address in `bytes` (room for the tests' offsets past it is the caller's).
unsigned char* aligned16(std::vector<unsigned char>& bytes) {
  return bytes.data() + (16 - reinterpret_cast<uintptr_t>(bytes.data()) % 16) % 16;
}

void expect_refused(const std::function<void()>& call, const std::string& prefix, const EmulatedCuda& cuda) {
  try {
    call();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
  }
  EXPECT_EQ(cuda.rt.launches, 0);
}

// A GPU's 2-, 4- and 8-byte loads fault at a misaligned address (a sticky error that ends the CUDA context);
// the emulator, like x86, reads any address, so without the check these calls "worked" here.
TEST(CudaEmulator, MisalignedTensorsAndPositionsAreRefusedBeforeAnyLaunch) {
  EmulatedCuda cuda;
  const int64_t S = 2, H = 2, D = 64;
  std::vector<unsigned char> bytes(static_cast<size_t>(S * H * D) * 4 + 64, 0);
  unsigned char* base = aligned16(bytes);
  Frequencies f = freqs_for(D);

  ApplyArgs a;
  a.backend = Backend::kCuda;
  a.positions = Positions::contiguous(3);
  a.q = TensorView::contiguous(base + 1, DType::kBF16, {1, S, H, D});  // a bf16 q at an odd address
  expect_refused([&] { apply_frequencies(f, a); },
                 "[rotary_apply] q must be aligned to its element size (2 bytes, bf16) for backend cuda, got an address 1 "
                 "bytes past a multiple of 2", cuda);

  a.q = TensorView::contiguous(base + 2, DType::kF32, {1, S, H, D});  // an f32 q 2 bytes past a multiple of 4
  expect_refused([&] { apply_frequencies(f, a); }, "[rotary_apply] q must be aligned to its element size (4 bytes, f32)", cuda);

  std::vector<unsigned char> id_bytes(64, 0);
  unsigned char* ids = aligned16(id_bytes) + 4;  // 4 past a multiple of 8
  a.q = TensorView::contiguous(base, DType::kF32, {1, S, H, D});
  a.positions = Positions::from_ids(TensorView::contiguous(ids, DType::kI64, {1, S}));
  a.seq_len = 16;
  expect_refused([&] { apply_frequencies(f, a); },
                 "[rotary_apply] positions.ids must be aligned to its element size (8 bytes, i64)", cuda);

  a.positions = Positions::from_ids(TensorView::contiguous(ids, DType::kI32, {1, S}));  // 4-byte ids: aligned
  EXPECT_NO_THROW(apply_frequencies(f, a));
  EXPECT_EQ(cuda.rt.launches, 1);
}

// Each pointer of the call is checked: k, the outputs, packed positions and a caller's cos/sin.
TEST(CudaEmulator, EveryPointerOfTheCallIsCheckedForAlignment) {
  EmulatedCuda cuda;
  const int64_t S = 2, D = 64;
  std::vector<unsigned char> bytes(8192, 0);
  unsigned char* base = aligned16(bytes);
  Frequencies f = freqs_for(D);
  auto args = [&] {
    ApplyArgs a;
    a.backend = Backend::kCuda;
    a.positions = Positions::contiguous(3);
    a.q = TensorView::contiguous(base, DType::kF32, {1, S, 2, D});
    return a;
  };
  ApplyArgs a = args();
  a.k = TensorView::contiguous(base + 1024 + 2, DType::kF32, {1, S, 1, D});
  expect_refused([&] { apply_frequencies(f, a); }, "[rotary_apply] k must be aligned to its element size (4 bytes, f32)", cuda);
  a = args();
  a.q_out = TensorView::contiguous(base + 2048 + 1, DType::kF32, {1, S, 2, D});
  expect_refused([&] { apply_frequencies(f, a); }, "[rotary_apply] q_out must be aligned to its element size", cuda);
  a = args();
  a.q = TensorView::contiguous(base, DType::kF32, {S, 2, D});
  a.layout = Layout::kTHD;
  a.positions = Positions::packed(TensorView::contiguous(base + 3072 + 4, DType::kI64, {2}));
  a.seq_len = 16;
  expect_refused([&] { apply_frequencies(f, a); }, "[rotary_apply] positions.cu_seqlens must be aligned to its element size (8 bytes, i64)", cuda);
  a = args();
  a.positions = Positions::contiguous(0);
  const TensorView cos = TensorView::contiguous(base + 3584 + 2, DType::kF32, {8, D / 2});
  const TensorView sin = TensorView::contiguous(base + 3200, DType::kF32, {8, D / 2});
  expect_refused([&] { apply_cos_sin(cos, sin, a); }, "[rotary_apply] cos must be aligned to its element size (4 bytes, f32)", cuda);
}

// A q with no heads leaves k as the plan's only tensor: its errors still name k (and k_out), not q.
TEST(CudaEmulator, KAloneAfterAZeroHeadQIsNamedK) {
  EmulatedCuda cuda;
  const int64_t S = 2, D = 64;
  std::vector<unsigned char> bytes(4096, 0);
  unsigned char* base = aligned16(bytes);
  Frequencies f = freqs_for(D);
  ApplyArgs a;
  a.backend = Backend::kCuda;
  a.positions = Positions::contiguous(3);
  a.q = TensorView::contiguous(base, DType::kF32, {1, S, 0, D});
  a.k = TensorView::contiguous(base + 2, DType::kF32, {1, S, 1, D});
  expect_refused([&] { apply_frequencies(f, a); }, "[rotary_apply] k must be aligned to its element size (4 bytes, f32)", cuda);
  a.k = TensorView::contiguous(base, DType::kF32, {1, S, 1, D});
  a.k_out = TensorView::contiguous(base + 2048 + 1, DType::kF32, {1, S, 1, D});
  a.q_out = TensorView::contiguous(base + 3072, DType::kF32, {1, S, 0, D});
  expect_refused([&] { apply_frequencies(f, a); }, "[rotary_apply] k_out must be aligned to its element size", cuda);
}

}  // namespace
}  // namespace rotary

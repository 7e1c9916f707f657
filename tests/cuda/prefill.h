// A prefill call that a real GPU launches token-parallel: enough tokens to fill every SM, three rows per token.
//
// launch_geometry (src/cuda/job.cc) goes head-parallel while the token blocks do not fill the device, so
// the matrix's small calls never take the token-parallel launch on a GPU. Here the tokens are sized from the
// SM count with the most threads an SM can hold (2048: an upper bound on what the occupancy query allows),
// so every thread's r0..r1 spans the token's three rows (q: 2 heads, k: 1), and the 16-byte path runs
// rotate_rows_vec's two-rows-at-a-time loop and its one-row tail. Shared by device_test.cc (on the GPU) and
// emulator_behaviour_test.cc (the same shape on the emulator with H100/H200 limits).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/fixture.h"
#include "rotary/apply.h"

namespace rotary::testing {

struct PrefillCase {
  static constexpr int64_t kHq = 2, kHk = 1, kD = 16;  // R == D; half (8) is whole 16-byte packs for f32/f16/bf16
  DType dt;
  Pairing pairing;
  int64_t T;                                  // tokens
  std::vector<unsigned char> q, k;            // the inputs' bytes
  Frequencies freqs;

  PrefillCase(DType d, Pairing p, int sm_count) : dt(d), pairing(p) {
    const int64_t w = 16 / static_cast<int64_t>(dtype_size(dt));   // elements per 16-byte pack
    const int64_t chunks = kD / 2 / w;                              // threads per token (block_x)
    const int64_t block_y = std::max<int64_t>(1, 256 / chunks);    // tokens per block (kTargetBlockThreads 256)
    T = block_y * static_cast<int64_t>(sm_count) * (2048 / 256) + 5;  // every SM full, and a partial block
    const std::vector<float> r = randn(static_cast<std::size_t>(T * (kHq + kHk) * kD), 77);
    const std::size_t es = dtype_size(dt);
    q.resize(static_cast<std::size_t>(T * kHq * kD) * es);
    k.resize(static_cast<std::size_t>(T * kHk * kD) * es);
    std::size_t n = 0;
    for (int64_t i = 0; i < T * kHq * kD; ++i) put(q.data(), dt, i, r[n++]);
    for (int64_t i = 0; i < T * kHk * kD; ++i) put(k.data(), dt, i, r[n++]);
    for (int64_t j = 0; j < kD / 2; ++j) freqs.inv_freq.push_back(std::pow(10000.0, -2.0 * static_cast<double>(j) / kD));
  }

  /// The call on buffers `qp`, `kp` (copies of q and k, on the host or the device), positions 0..T-1.
  ApplyArgs args(void* qp, void* kp, Backend be) const {
    ApplyArgs a;
    a.q = TensorView::contiguous(qp, dt, {1, T, kHq, kD});
    a.k = TensorView::contiguous(kp, dt, {1, T, kHk, kD});
    a.positions = Positions::contiguous(0);
    a.pairing = pairing;
    a.backend = be;
    return a;
  }

  /// The CPU backend's result (q then k bytes).
  void cpu_result(std::vector<unsigned char>* q_out, std::vector<unsigned char>* k_out) const {
    *q_out = q;
    *k_out = k;
    CosSinTable table(freqs);
    apply_table(table, args(q_out->data(), k_out->data(), Backend::kCpu));
  }

  /// Mismatches of `got` against `want` (elements of dt, within the dtype's tolerance); reports a few.
  int compare(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want, const char* what) const {
    int bad = 0;
    const int64_t n = static_cast<int64_t>(got.size() / dtype_size(dt));
    for (int64_t i = 0; i < n; ++i) {
      const double x = get(got.data(), dt, i), y = get(want.data(), dt, i);
      if (!(std::fabs(x - y) <= output_abs_tol(dt)) && bad++ < 3)
        ADD_FAILURE() << what << " " << dtype_name(dt) << " " << pairing_name(pairing) << ": element " << i << " is " << x
                      << ", cpu " << y << " (T " << T << ")";
    }
    return bad;
  }
};

}  // namespace rotary::testing

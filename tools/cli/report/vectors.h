// Test vectors for the report: seeded random data, dot products, and rotation through rotary's f32 kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "rotary/freqs.h"
#include "rotary/types.h"

namespace rotary::cli::report {

/// n values ~ N(0, 1) from a fixed seed (the report is reproducible run to run).
std::vector<float> random_normal(size_t n, uint64_t seed);
/// Scales v to unit length.
void normalize(std::vector<float>& v);
/// Σ a[i]·b[i] in double.
double dot(const float* a, const float* b, int64_t n);
/// Rotates x ([T, H, D] f32, in place) at per-token positions `ids` with the exact on-the-fly path
/// (apply_frequencies), on one thread.
void rotate_ids(const Frequencies& f, Pairing pairing, std::vector<float>& x, int64_t T, int64_t H, int64_t D,
                const std::vector<int64_t>& ids);

}  // namespace rotary::cli::report

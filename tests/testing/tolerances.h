// The one table of numerical tolerances used by every C++ test, each justified by its dtype.
#pragma once

#include "rotary/types.h"

namespace rotary::testing {

/// Max absolute error allowed for a rotated output with |x| ~ 1 (inputs drawn from N(0,1)).
///  f64 : rotation in double from f32 cos/sin: only summation order differs            -> 1e-12
///  f32 : computed in f32 (FMA or not) vs reference in double, then rounded once;
///        |x0*c - x1*s| <= ~4: two roundings of ~2^-24 * 4                             -> 2e-6
///  f16 : one rounding of the result to 11 bits (ulp(4) = 2^-8 = 3.9e-3; half ulp + f32) -> 2.5e-3
///  bf16: one rounding to 8 bits (ulp(4) = 2^-5 = 0.031; half ulp 0.0156)               -> 1.6e-2
/// The bf16/f16 bounds allow a different rounding *direction* only in ties/near-ties, i.e.
/// fast kernels and the reference may differ by at most one output ulp.
inline double output_abs_tol(DType dtype) {
  switch (dtype) {
    case DType::kF64: return 1e-12;
    case DType::kF32: return 2e-6;
    case DType::kF16: return 2.5e-3;
    case DType::kBF16: return 1.6e-2;
    default: return 0.0;
  }
}

/// Issue contract: max abs error of the rotated f32 output vs fp64 truth for |x| ~ 1, any position < 2^24.
inline constexpr double kAccuracyContractF32 = 4e-6;

/// inv_freq vs Hugging Face's float32 values (HF's own float32 rounding is up to ~2.5e-7 relative).
inline constexpr double kInvFreqRelTol = 1e-6;
/// attention_factor vs HF.
inline constexpr double kAttentionFactorRelTol = 1e-6;

/// Agreement with HF's f32 apply outputs where HF's own f32 angles are accurate (small positions).
inline constexpr double kHfApplyF32AbsTol = 1e-5;
/// ONNX conformance outputs.
inline constexpr double kOnnxAbsTol = 1e-6;

}  // namespace rotary::testing

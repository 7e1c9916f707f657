// `rotary bench --backend cuda` (bench_cuda.cc): the CUDA kernels timed on the GPU; a usage error without CUDA.
#pragma once

#include "cli.h"

namespace rotary::cli {

/// Runs the CUDA bench with bench's parsed flags (--json, --quick, --case T1|T4096|T32768|T131072).
/// Returns the exit code (2 without CUDA or without a device).
int run_bench_cuda(const Flags& flags);

}  // namespace rotary::cli

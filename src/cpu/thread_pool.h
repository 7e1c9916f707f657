// Internal: the persistent worker pool the CPU backend splits rows over (see docs/threading.md).
#pragma once

#include <cstdint>

namespace rotary::detail::cpu {

/// Runs fn(ctx, chunk) for every chunk in [0, nchunks) using up to `threads` threads, the calling
/// thread included; returns when all chunks are done. Chunks are handed out dynamically, so
/// callers must make results independent of which thread runs which chunk.
///
/// Never oversubscribes: runs every chunk on the calling thread, in order, when threads <= 1,
/// nchunks <= 1, the caller is itself a pool worker (a nested call), or another call is already
/// using the pool. Workers are started on first use (and added when a call asks for more) and
/// live until the process exits.
void parallel_for(int threads, int64_t nchunks, void (*fn)(void* ctx, int64_t chunk), void* ctx);

/// True on a pool thread while it runs a chunk (including the calling thread while it helps).
bool in_parallel_region();

/// Cores this process may run on: the CPUs of its affinity mask (sched_getaffinity, so `taskset`,
/// cgroup cpusets and os.sched_setaffinity are respected), else std::thread::hardware_concurrency(),
/// at least 1. Read on each call (a system call, ~1 us).
int usable_cores();

/// usable_cores() as last read, read again when older than 100 ms: what cpu_apply uses, so a call pays
/// a clock read, not a system call, and a changed mask is followed within 0.1 s.
int usable_cores_recent();

}  // namespace rotary::detail::cpu

// The software prefetch of large calls' input rows, a page ahead of the row being read: into L2 on x86.
#pragma once

#include <hwy/base.h>
#include <hwy/cache_control.h>

#if HWY_ARCH_X86 && !defined(HWY_DISABLE_CACHE_CONTROL)
#include <xmmintrin.h>
#endif

namespace rotary::detail::cpu {

/// Prefetches the cache line holding `p` (any address: prefetches never fault) for a read a page or so later.
/// On x86 the line goes into L2 only (PREFETCHT2), not into L1 as hwy::Prefetch's PREFETCHT0 does: on the Intel
/// guest of docs/performance.md ("Prefetching into L2") large calls measured faster so (prologue prefill medians
/// 1.05-1.09x, apply 1.05x; a few configurations within the noise slower), and the limit loops, which prefetch the
/// same way, took 14-18 % less time; on an AMD Zen 4 guest both got faster too (docs/performance.md, "The prefetch
/// hint and huge pages on AMD Zen 4"). Elsewhere it is hwy::Prefetch. The cache rows prefetched just before they are
/// written (PrefetchSlotRows) keep hwy::Prefetch. HWY_DISABLE_CACHE_CONTROL turns it off, as it does hwy::Prefetch.
/// Inline: GCC deletes out-of-line functions made only of prefetches.
HWY_INLINE void PrefetchStream(const void* p) {
#if HWY_ARCH_X86 && !defined(HWY_DISABLE_CACHE_CONTROL)
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T2);
#else
  hwy::Prefetch(p);
#endif
}

}  // namespace rotary::detail::cpu

// The cos/sin cache: exact angles, grown lazily, safe to grow while others read.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "rotary/api.h"
#include "rotary/freqs.h"

namespace rotary {

namespace detail {
struct TableAttachment;  // internal (src/plan/table_attachment.h)
}  // namespace detail

/// Computes one position's cos/sin row exactly: the angle pos*theta_i is formed in double
/// (|error| <= ~2^-29 rad for pos < 2^24), reduced by the C library's correctly range-reduced
/// double sin/cos, multiplied by attention_factor and rounded once to f32.
/// Max abs error of each stored value vs fp64 truth: <= 6e-8 * attention_factor (one f32 rounding).
/// `pos` may be fractional. cos_out/sin_out have inv_freq.size() entries.
ROTARY_API void compute_cos_sin_row(const Frequencies& freqs, double pos, float* cos_out, float* sin_out);
/// Same with a raw table of theta values (kernels' on-the-fly path).
ROTARY_API void compute_cos_sin_row(const double* inv_freq, int64_t half, double attention_factor, double pos,
                                    float* cos_out, float* sin_out);

struct TableOptions {
  int64_t initial_positions = 0;  ///< positions [0, n) built eagerly at construction
  /// Hard cap on positions the table may hold; growth past it throws Error(kOutOfRange).
  /// Memory is max_positions * rotary_dim * 4 bytes at most (2^22 positions at rotary_dim 128 = 2 GiB),
  /// allocated only as positions are actually used (amortised doubling). Rope's kAuto mode computes
  /// cos/sin on the fly instead of growing the table past this cap (see docs/accuracy.md).
  int64_t max_positions = int64_t(1) << 22;
};

/// A growable table of f32 rows, one per integer position p in [0, size()):
///   row(p) = [ cos(p*theta_0)*af, ..., cos(p*theta_{h-1})*af, sin(p*theta_0)*af, ..., sin(p*theta_{h-1})*af ]
/// where h = rotary_dim/2 and af = attention_factor (folded in, as HF does).
///
/// Thread-safety: all const methods and ensure() may be called concurrently from any threads. Growth
/// builds a larger block (old rows copied, new rows computed) and publishes it with a release store;
/// readers never wait. A View pins the block it points to: its rows stay valid and unchanged for as long
/// as the View (or a copy of it) exists, even if the table grows or is destroyed meanwhile. A block that
/// has been replaced is freed as soon as no View refers to it, so memory is the current block plus the
/// blocks of Views still alive (in-flight apply calls): at most max_positions rows once calls return.
/// Growth is amortised (capacity at least doubles).
///
/// Fork safety: no lock is held across growth. Concurrent growers take turns through an atomic flag that
/// records the owner's process id; a child forked while a parent thread was growing sees another
/// process's id there, takes the flag over and grows normally (see docs/threading.md).
class ROTARY_API CosSinTable {
 public:
  struct Block;  // one allocation of rows (internal)

  /// The rows [0, size) of the table when the view was taken, kept alive by the view (see above).
  class ROTARY_API View {
   public:
    const float* data = nullptr;  ///< size * 2 * half floats
    int64_t size = 0;             ///< positions available
    int64_t half = 0;
    const float* cos(int64_t pos) const { return data + pos * 2 * half; }
    const float* sin(int64_t pos) const { return data + pos * 2 * half + half; }

    View() = default;
    View(const View& other);
    View(View&& other) noexcept;
    View& operator=(View other) noexcept;
    ~View();

   private:
    friend class CosSinTable;
    Block* pin_ = nullptr;
  };

  explicit CosSinTable(Frequencies freqs, TableOptions options = {});
  CosSinTable(const CosSinTable&) = delete;
  CosSinTable& operator=(const CosSinTable&) = delete;
  ~CosSinTable();

  const Frequencies& frequencies() const { return freqs_; }
  int64_t half() const { return static_cast<int64_t>(freqs_.inv_freq.size()); }
  int64_t max_positions() const { return options_.max_positions; }
  /// Positions currently built.
  int64_t size() const;
  /// Makes positions [0, n) available (grows if needed). Throws Error(kOutOfRange) if n > max_positions.
  void ensure(int64_t n_positions);
  /// Snapshot of the current contents, valid while the View exists.
  View view() const;
  /// ensure(n_positions) then view().
  View view_for(int64_t n_positions);

 private:
  class GrowFlag;
  /// Drops the table's reference to replaced blocks once no reader is between loading and pinning one.
  /// Caller holds the grow flag.
  void reclaim_locked() const;
  /// reclaim_locked() if the grow flag is free right now (never waits).
  void try_reclaim() const;

  Frequencies freqs_;
  TableOptions options_;
  std::atomic<Block*> current_{nullptr};
  std::atomic<int64_t> size_{0};
  mutable std::atomic<int64_t> pinning_{0};      // readers between loading current_ and pinning it
  mutable std::atomic<int32_t> grower_{0};       // process id of the growing (or reclaiming) thread, 0 = none
  mutable std::atomic<bool> has_retired_{false};
  mutable Block* retired_ = nullptr;             // replaced blocks still referenced by the table; grow flag
  // Backend data that lives and dies with the table (the CUDA backend's device copies of the rows),
  // created on first use through detail::TableAttachment and published with a compare-exchange (no
  // lock: see docs/threading.md on fork).
  friend struct detail::TableAttachment;
  mutable std::atomic<std::shared_ptr<void>*> attachment_{nullptr};
};

}  // namespace rotary

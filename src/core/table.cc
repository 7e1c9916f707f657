// The cos/sin cache: exact per-row angles (double product, libm range reduction) and lock-free reads while growing.
#include "rotary/table.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "core/frequency_checks.h"

namespace rotary {

namespace {
constexpr const char* kWhere = "rotary_table";
// Smallest block ever allocated by growth (rows); avoids many tiny blocks for short prompts.
constexpr int64_t kMinGrowthRows = 256;
}  // namespace

void compute_cos_sin_row(const double* inv_freq, int64_t half, double attention_factor, double pos, float* cos_out,
                         float* sin_out) {
  for (int64_t i = 0; i < half; ++i) {
    // pos < 2^24 and theta <= 1: the product carries a relative error of 2^-53, i.e. an absolute
    // phase error below 2^24 * 2^-53 = 2^-29 rad. glibc's cos/sin reduce the argument exactly.
    const double angle = pos * inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(angle) * attention_factor);
    sin_out[i] = static_cast<float>(std::sin(angle) * attention_factor);
  }
}

void compute_cos_sin_row(const Frequencies& freqs, double pos, float* cos_out, float* sin_out) {
  compute_cos_sin_row(freqs.inv_freq.data(), static_cast<int64_t>(freqs.inv_freq.size()), freqs.attention_factor,
                      pos, cos_out, sin_out);
}

// ------------------------------------------------------------------------------------------ blocks

struct CosSinTable::Block {
  std::unique_ptr<float[]> data;
  int64_t size = 0;
  // One reference held by the table (while current, and while retired until reclaim_locked drops it),
  // plus one per View. Whoever drops the last one frees the block.
  std::atomic<int64_t> refs{1};
  Block* next_retired = nullptr;
};

namespace {
void unref(CosSinTable::Block* b) {
  if (b != nullptr && b->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete b;
}
}  // namespace

CosSinTable::View::View(const View& other)
    : data(other.data), size(other.size), half(other.half), pin_(other.pin_) {
  if (pin_ != nullptr) pin_->refs.fetch_add(1, std::memory_order_relaxed);
}

CosSinTable::View::View(View&& other) noexcept
    : data(other.data), size(other.size), half(other.half), pin_(other.pin_) {
  other.pin_ = nullptr;
}

CosSinTable::View& CosSinTable::View::operator=(View other) noexcept {
  std::swap(data, other.data);
  std::swap(size, other.size);
  std::swap(half, other.half);
  std::swap(pin_, other.pin_);
  return *this;
}

CosSinTable::View::~View() { unref(pin_); }

// ------------------------------------------------------------------------------------------ grow flag

/// Exclusive right to grow (or reclaim) a table, without a lock that fork() could leave held: an atomic
/// holding the owner's process id. A thread of this process holding it is waited for (yield, then short
/// sleeps); an id of another process can only be a parent's thread that was growing when this process
/// was forked, so it is taken over.
class CosSinTable::GrowFlag {
 public:
  /// Waits for the flag (wait = true) or tries once.
  GrowFlag(std::atomic<int32_t>& flag, bool wait) : flag_(flag) {
    const int32_t me = static_cast<int32_t>(::getpid());
    for (int attempt = 0;; ++attempt) {
      int32_t seen = 0;
      if (flag_.compare_exchange_strong(seen, me, std::memory_order_acq_rel)) break;
      if (seen != me && flag_.compare_exchange_strong(seen, me, std::memory_order_acq_rel)) break;  // stale
      if (!wait) return;
      if (attempt < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(attempt < 256 ? 20 : 500));
    }
    held_ = true;
  }
  ~GrowFlag() {
    if (held_) flag_.store(0, std::memory_order_release);
  }
  bool held() const { return held_; }

 private:
  std::atomic<int32_t>& flag_;
  bool held_ = false;
};

// ------------------------------------------------------------------------------------------ table

CosSinTable::CosSinTable(Frequencies freqs, TableOptions options) : freqs_(std::move(freqs)), options_(options) {
  detail::check_frequencies(freqs_, kWhere, "frequencies");
  if (options_.max_positions < 0)
    fail(Error::Kind::kInvalidArgument, kWhere,
         "options.max_positions must be >= 0, got " + std::to_string(options_.max_positions));
  if (options_.initial_positions < 0 || options_.initial_positions > options_.max_positions)
    fail(Error::Kind::kInvalidArgument, kWhere,
         "options.initial_positions must be in [0, max_positions = " + std::to_string(options_.max_positions) +
             "], got " + std::to_string(options_.initial_positions));
  const int64_t half = this->half();
  // Rows are 2*half floats; refuse capacities whose byte size would overflow.
  if (options_.max_positions > 0 && half > 0 &&
      options_.max_positions > INT64_MAX / (2 * half * static_cast<int64_t>(sizeof(float))))
    fail(Error::Kind::kInvalidArgument, kWhere,
         "options.max_positions * rotary_dim * 4 bytes overflows int64, got max_positions " +
             std::to_string(options_.max_positions));
  if (options_.initial_positions > 0) ensure(options_.initial_positions);
}

CosSinTable::~CosSinTable() {
  // No other thread uses the table any more (its owner destroys it); Views keep their blocks alive.
  delete attachment_.load(std::memory_order_acquire);
  Block* b = retired_;
  while (b != nullptr) {
    Block* next = b->next_retired;
    unref(b);
    b = next;
  }
  unref(current_.load(std::memory_order_acquire));
}

int64_t CosSinTable::size() const { return size_.load(std::memory_order_acquire); }

CosSinTable::View CosSinTable::view() const {
  View v;
  v.half = half();
  // Between loading current_ and pinning it, a reader is counted in pinning_: a replaced block loses the
  // table's reference only while pinning_ is 0 (reclaim_locked), so the block cannot be freed under us.
  pinning_.fetch_add(1, std::memory_order_seq_cst);
  Block* b = current_.load(std::memory_order_seq_cst);
  if (b != nullptr) b->refs.fetch_add(1, std::memory_order_relaxed);
  pinning_.fetch_sub(1, std::memory_order_seq_cst);
  if (b != nullptr) {
    v.pin_ = b;
    v.data = b->data.get();
    v.size = b->size;
  }
  if (has_retired_.load(std::memory_order_relaxed)) try_reclaim();
  return v;
}

void CosSinTable::reclaim_locked() const {
  if (retired_ == nullptr) return;
  // seq_cst pairs with the readers' increment: a 0 here means every reader that could still load a
  // retired block has pinned it already, and later readers load the newer current_.
  if (pinning_.load(std::memory_order_seq_cst) != 0) return;  // retried by the next view() or growth
  Block* b = retired_;
  retired_ = nullptr;  // detach first: a fork() from here on leaks the rest, never frees twice
  has_retired_.store(false, std::memory_order_relaxed);
  while (b != nullptr) {
    Block* next = b->next_retired;
    unref(b);
    b = next;
  }
}

void CosSinTable::try_reclaim() const {
  GrowFlag flag(grower_, /*wait=*/false);
  if (flag.held()) reclaim_locked();
}

void CosSinTable::ensure(int64_t n_positions) {
  if (n_positions <= size()) return;  // fast path: acquire load only
  if (n_positions > options_.max_positions)
    fail(Error::Kind::kOutOfRange, kWhere,
         "position " + std::to_string(n_positions - 1) + " is beyond the table limit: max_positions is " +
             std::to_string(options_.max_positions) + " (TableOptions::max_positions; use on-the-fly mode beyond)");
  GrowFlag flag(grower_, /*wait=*/true);
  Block* cur = current_.load(std::memory_order_acquire);
  const int64_t have = cur ? cur->size : 0;
  if (n_positions <= have) return;  // another thread grew it meanwhile

  // Amortised growth: at least double, at least kMinGrowthRows, never past max_positions.
  int64_t cap = std::max<int64_t>(n_positions, std::max<int64_t>(kMinGrowthRows, have > INT64_MAX / 2 ? have : 2 * have));
  cap = std::min(cap, options_.max_positions);
  const int64_t h = half();
  const int64_t row = 2 * h;

  auto block = std::make_unique<Block>();
  block->data.reset(new float[static_cast<std::size_t>(cap * row)]);
  block->size = cap;
  float* dst = block->data.get();
  if (have > 0) std::memcpy(dst, cur->data.get(), static_cast<std::size_t>(have * row) * sizeof(float));
  for (int64_t p = have; p < cap; ++p)
    compute_cos_sin_row(freqs_, static_cast<double>(p), dst + p * row, dst + p * row + h);

  current_.store(block.release(), std::memory_order_seq_cst);
  size_.store(cap, std::memory_order_release);
  if (cur != nullptr) {
    cur->next_retired = retired_;
    retired_ = cur;
    has_retired_.store(true, std::memory_order_relaxed);
  }
  reclaim_locked();
}

CosSinTable::View CosSinTable::view_for(int64_t n_positions) {
  ensure(n_positions);
  return view();
}

}  // namespace rotary

// The cos/sin cache: exact per-row angles (double product, libm range reduction) and lock-free reads while growing.
#include "rotary/table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/frequency_checks.h"

namespace rotary {

namespace {
constexpr const char* kWhere = "rotary_table";
// Smallest block ever allocated by growth (rows); avoids many tiny blocks for short prompts.
constexpr int64_t kMinGrowthRows = 256;
// Every growth at least doubles the capacity (or jumps to max_positions, after which no growth
// happens), so a table never holds more than ~65 blocks. Reserving this many up front means
// blocks_ never reallocates, so `current_` (a pointer into blocks_) stays valid.
constexpr std::size_t kMaxBlocks = 70;
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
  blocks_.reserve(kMaxBlocks);
  if (options_.initial_positions > 0) ensure(options_.initial_positions);
}

CosSinTable::~CosSinTable() = default;

int64_t CosSinTable::size() const {
  const Block* b = current_.load(std::memory_order_acquire);
  return b ? b->size : 0;
}

CosSinTable::View CosSinTable::view() const {
  const Block* b = current_.load(std::memory_order_acquire);
  View v;
  v.half = half();
  if (b) {
    v.data = b->data.get();
    v.size = b->size;
  }
  return v;
}

void CosSinTable::ensure(int64_t n_positions) {
  if (n_positions <= size()) return;  // fast path: acquire load only
  if (n_positions > options_.max_positions)
    fail(Error::Kind::kOutOfRange, kWhere,
         "position " + std::to_string(n_positions - 1) + " is beyond the table limit: max_positions is " +
             std::to_string(options_.max_positions) + " (TableOptions::max_positions; use on-the-fly mode beyond)");
  std::lock_guard<std::mutex> lock(grow_mutex_);
  const Block* cur = current_.load(std::memory_order_acquire);
  const int64_t have = cur ? cur->size : 0;
  if (n_positions <= have) return;  // another thread grew it meanwhile
  if (blocks_.size() >= kMaxBlocks)
    fail(Error::Kind::kInternal, kWhere, "too many table blocks, got " + std::to_string(blocks_.size()));

  // Amortised growth: at least double, at least kMinGrowthRows, never past max_positions.
  int64_t cap = std::max<int64_t>(n_positions, std::max<int64_t>(kMinGrowthRows, have > INT64_MAX / 2 ? have : 2 * have));
  cap = std::min(cap, options_.max_positions);
  const int64_t h = half();
  const int64_t row = 2 * h;

  Block block;
  block.data.reset(new float[static_cast<std::size_t>(cap * row)]);
  block.size = cap;
  float* dst = block.data.get();
  if (have > 0) std::memcpy(dst, cur->data.get(), static_cast<std::size_t>(have * row) * sizeof(float));
  for (int64_t p = have; p < cap; ++p)
    compute_cos_sin_row(freqs_, static_cast<double>(p), dst + p * row, dst + p * row + h);

  blocks_.push_back(std::move(block));  // no reallocation: capacity reserved in the constructor
  current_.store(&blocks_.back(), std::memory_order_release);
}

CosSinTable::View CosSinTable::view_for(int64_t n_positions) {
  ensure(n_positions);
  return view();
}

}  // namespace rotary

// Internal: backend data tied to a CosSinTable's lifetime (the CUDA backend's per-device copies of its rows).
#pragma once

#include <memory>
#include <atomic>

#include "rotary/table.h"

namespace rotary::detail {

/// The one accessor of CosSinTable's attachment slot. A table has at most one attachment, of one type
/// (today: cuda::DeviceTables); it is destroyed with the table, after every View of it.
struct TableAttachment {
  /// Returns the table's attachment, creating it with `make()` (a std::shared_ptr<T>) on first use.
  /// No lock (a fork() must not leave one held): two racing first calls may both make() one; the loser's
  /// is dropped.
  template <class T, class Make>
  static T& get(const CosSinTable& table, Make make) {
    std::shared_ptr<void>* have = table.attachment_.load(std::memory_order_acquire);
    if (have == nullptr) {
      auto made = std::make_unique<std::shared_ptr<void>>(make());
      if (table.attachment_.compare_exchange_strong(have, made.get(), std::memory_order_acq_rel)) have = made.release();
    }
    return *static_cast<T*>(have->get());
  }
};

}  // namespace rotary::detail

// Internal: backend data tied to a CosSinTable's lifetime (the CUDA backend's per-device copies of its rows).
#pragma once

#include <memory>
#include <mutex>

#include "rotary/table.h"

namespace rotary::detail {

/// The one accessor of CosSinTable's attachment slot. A table has at most one attachment, of one type
/// (today: cuda::DeviceTables); it is destroyed with the table, after every View of it.
struct TableAttachment {
  /// Returns the table's attachment, creating it with `make()` (a std::shared_ptr<T>) on first use.
  template <class T, class Make>
  static T& get(const CosSinTable& table, Make make) {
    std::lock_guard<std::mutex> lock(table.attachment_mutex_);
    if (!table.attachment_) table.attachment_ = make();
    return *static_cast<T*>(table.attachment_.get());
  }
};

}  // namespace rotary::detail

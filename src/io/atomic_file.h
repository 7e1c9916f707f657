// Internal: crash-safe file output (temporary file in the target's folder, fsync, rename) for every file rotary writes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "rotary/api.h"

namespace rotary::io {

/// A file written so that the target path holds either its old contents or the complete new ones, never a
/// prefix: bytes go to a new temporary file next to the target (same folder, so the rename cannot cross a
/// file system), commit() fsyncs it and renames it over the target (then fsyncs the folder). Until commit()
/// succeeds the target is untouched; on any error, or when the object is destroyed uncommitted, the
/// temporary file is removed. Errors (full disk, file-size limit, permissions) throw Error(kIo) naming the
/// target path and the reason.
///
/// The target may be the file a caller has just read (its contents are replaced only at commit()). A
/// symbolic link is followed (its target is replaced, the link stays). A target that exists and is not a
/// regular file (/dev/stdout, a FIFO) is written directly, as nothing can be renamed over it.
/// A new file gets mode 0666 minus the umask, as an ordinary open() would; a replaced file keeps its mode.
class ROTARY_API AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  void write(const void* data, std::size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// fsync + rename over the target. After it, write() and commit() are errors.
  void commit();

 private:
  [[noreturn]] void fail_io(const std::string& what, int err);
  void discard() noexcept;

  std::string path_;    // as given (for messages)
  std::string target_;  // path_ with symbolic links resolved
  std::string temp_;    // empty when writing directly
  int fd_ = -1;
  bool committed_ = false;
};

/// AtomicFile in one call: the whole file is `contents`.
ROTARY_API void write_file_atomic(const std::string& path, std::string_view contents);

}  // namespace rotary::io

// Crash-safe file output: a temporary file next to the target, fsync, rename (see atomic_file.h).
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>

#include "rotary/types.h"

namespace rotary::io {
namespace {

constexpr const char* kWhere = "rotary_io";

std::string folder_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// A name in `folder` that no one else uses: the target's name (cut, to stay below NAME_MAX), the
/// process id, a counter and a random number.
std::string temp_name(const std::string& folder, const std::string& name) {
  static std::atomic<unsigned> counter{0};
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return folder + "/." + name.substr(0, 96) + ".tmp-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter.fetch_add(1)) + "-" + std::to_string(rng() % 1000000007u);
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path) : path_(path), target_(path) {
  if (path.empty()) fail(Error::Kind::kIo, kWhere, "cannot write a file with an empty path");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char resolved[PATH_MAX];
    if (::realpath(path.c_str(), resolved) != nullptr) target_ = resolved;  // a dangling link is replaced
  }
  const bool exists = ::stat(target_.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    // /dev/stdout, a FIFO, a device: nothing can be renamed over it; write straight into it.
    fd_ = ::open(target_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd_ < 0) fail_io("cannot open for writing", errno);
    return;
  }
  const std::string folder = folder_of(target_), name = name_of(target_);
  for (int attempt = 0; attempt < 64 && fd_ < 0; ++attempt) {
    temp_ = temp_name(folder, name);
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) {
      const int err = errno;
      temp_.clear();
      fail_io("cannot create a temporary file in '" + folder + "'", err);
    }
  }
  if (fd_ < 0) {
    temp_.clear();
    fail_io("cannot create a temporary file in '" + folder + "'", EEXIST);
  }
  if (exists && ::fchmod(fd_, st.st_mode & 07777) != 0) fail_io("cannot set the mode of the temporary file", errno);
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void AtomicFile::fail_io(const std::string& what, int err) {
  discard();
  committed_ = true;  // nothing left to clean up
  fail(Error::Kind::kIo, kWhere,
       "cannot write '" + path_ + "': " + what + ": " + std::strerror(err) + " (no file was changed)");
}

void AtomicFile::write(const void* data, std::size_t size) {
  if (fd_ < 0) fail(Error::Kind::kIo, kWhere, "cannot write '" + path_ + "': the file is already closed");
  const auto* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_io("write failed", errno);
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) fail(Error::Kind::kIo, kWhere, "cannot write '" + path_ + "': the file is already closed");
  if (temp_.empty()) {  // direct write into a special file
    const int fd = fd_;
    fd_ = -1;
    committed_ = true;
    if (::close(fd) != 0) fail(Error::Kind::kIo, kWhere, "cannot write '" + path_ + "': " + std::strerror(errno));
    return;
  }
  if (::fsync(fd_) != 0) fail_io("fsync failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_io("close failed", errno);
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail_io("rename failed", errno);
  temp_.clear();
  committed_ = true;
  // Make the rename itself durable (best effort: some file systems refuse fsync on a folder).
  const int dir = ::open(folder_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFile f(path);
  f.write(contents);
  f.commit();
}

}  // namespace rotary::io

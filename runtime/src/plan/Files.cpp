//===- Files.cpp - regular files only, written atomically ------------------===//
#include "hetplan/runtime/Files.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hetplan::runtime {

namespace {
const char *kindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string folderOf(const std::string &path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool writeAll(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}
} // namespace

std::string replaceableError(const std::string &path) {
  struct stat st;
  // stat follows a symlink: a link to /dev/null is refused like /dev/null.
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  std::string kind = kindOf(st.st_mode);
  return path + ": is " + (kind == "not a regular file" ? "" : kind + ", ") +
         "not a regular file; refusing to replace it";
}

bool writeFileAtomically(const std::string &path, const std::string &bytes, std::string &error) {
  error = replaceableError(path);
  if (!error.empty()) return false;
  static std::atomic<unsigned> counter{0};
  std::string temp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    temp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    error = path + ": cannot write: " + std::strerror(errno);
    return false;
  }
  auto fail = [&](int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    error = path + ": cannot write: " + std::strerror(err);
    return false;
  };
  if (!writeAll(fd, bytes.data(), bytes.size()) || ::fsync(fd) != 0) return fail(errno);
  int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail(errno);
  // Checked again: the target may have changed while we wrote.
  error = replaceableError(path);
  if (!error.empty()) {
    ::unlink(temp.c_str());
    return false;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) return fail(errno);
  // Make the rename durable; failing here loses nothing visible.
  int dir = ::open(folderOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return true;
}

} // namespace hetplan::runtime

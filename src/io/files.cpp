// Whole-file reading, atomic writing, shape formatting (gmlp/files.h).
#include "gmlp/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "gmlp/error.h"

namespace gmlp {
namespace {
std::string errno_str() { return std::strerror(errno); }

template <typename Bytes>
Bytes read_whole(const std::string& path) {
  Bytes out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + errno_str());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    std::string why = S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file";
    ::close(fd);
    throw Error(path + ": cannot read: " + why);
  }
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t r = ::read(fd, reinterpret_cast<char*>(out.data()) + done, out.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      std::string why = r < 0 ? errno_str() : "file shrank while reading";
      ::close(fd);
      throw Error(path + ": cannot read: " + why);
    }
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  return out;
}
}  // namespace

std::string read_file(const std::string& path) { return read_whole<std::string>(path); }
std::vector<uint8_t> read_file_bytes(const std::string& path) { return read_whole<std::vector<uint8_t>>(path); }

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // O_EXCL | O_NOFOLLOW: never write through a link planted at the temp name. What is
  // there can only be left by a dead process with our pid (or planted): remove it and
  // try once more; unlink removes a link, not its target.
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST && ::unlink(tmp.c_str()) == 0) fd = ::open(tmp.c_str(), kFlags, 0644);
  if (fd < 0) throw Error(path + ": cannot create temp file " + tmp + ": " + errno_str());
  // Capture errno before cleanup calls can overwrite it.
  auto fail = [&](const char* step) {
    std::string why = errno_str();
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(path + ": " + step + " failed: " + why);
  };
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write");
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) fail("fsync");
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) fail("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename");

  // Without this the rename itself may not survive a crash.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw Error(path + ": cannot open directory " + dir + " to fsync: " + errno_str());
  // Some filesystems cannot fsync directories (EINVAL); the file itself is complete.
  if (::fsync(dfd) != 0 && errno != EINVAL) {
    std::string why = errno_str();
    ::close(dfd);
    throw Error(path + ": fsync of directory " + dir + " failed: " + why);
  }
  ::close(dfd);
}

void check_json_depth(std::string_view text, const std::string& what, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth)
        throw Error(what + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& what, int max_depth) {
  check_json_depth(text, what, max_depth);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not valid JSON: " + e.what());
  }
}

DirLock::DirLock(const std::string& dir) : path_((std::filesystem::path(dir) / ".lock").string()) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot lock '" + dir + "': cannot open " + path_ + ": " + errno_str());
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const bool busy = errno == EWOULDBLOCK;
    const std::string why = errno_str();
    char holder[32] = {0};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    if (busy)
      throw Error("'" + dir + "' is in use by another gmlp run" +
                  (n > 0 ? " (pid " + std::string(holder, size_t(n)) + ")" : std::string()) +
                  "; wait for it to finish or choose another --out");
    throw Error("cannot lock '" + dir + "': " + why);
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    // The lock holds without the pid; it only makes the other run's message less helpful.
  }
  // Holding the lock, no other gmlp process writes here: temp files are leftovers of a
  // killed run.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().find(".tmp.") != std::string::npos && e.is_regular_file(ec))
      std::filesystem::remove(e.path(), ec);
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The lines of a text file: "\n", "\r\n" and a lone "\r" all end a line (files saved
// with old Mac line endings would otherwise be one example), a UTF-8 byte-order mark
// is dropped, and a final line needs no terminator.
std::vector<std::string_view> split_lines(std::string_view text) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  std::vector<std::string_view> lines;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n' && text[i] != '\r') continue;
    lines.push_back(text.substr(start, i - start));
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

}  // namespace gmlp

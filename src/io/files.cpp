// Whole-file reading, atomic writing, shape formatting (gmlp/files.h).
#include "gmlp/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "gmlp/error.h"

namespace gmlp {
namespace {
std::string errno_str() { return std::strerror(errno); }
}  // namespace

std::string read_file(const std::string& path) {
  std::string out;
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
    ssize_t r = ::read(fd, out.data() + done, out.size() - done);
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

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace gmlp

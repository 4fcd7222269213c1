#pragma once
// Whole-file reading, atomic writing and shape formatting: one implementation each,
// used by checkpoints, configs, corpora, images and logs.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace gmlp {

// Reads a whole regular file; Error naming the path when it cannot (missing, a
// directory, unreadable).
std::string read_file(const std::string& path);
// The same as bytes (a data file held as it is read, with no copy).
std::vector<uint8_t> read_file_bytes(const std::string& path);
// Writes bytes to path atomically: a temp file beside it, fsync, rename, fsync of the
// directory, so a crash leaves either the old file or the new one.
void write_file_atomic(const std::string& path, const std::string& bytes);
// The lines of a text (views into it): "\n", "\r\n" and a lone "\r" all end a line, a
// UTF-8 byte-order mark is dropped, and a final line needs no terminator.
std::vector<std::string_view> split_lines(std::string_view text);
// Parses JSON text from a file, a header or an option; `what` names it in errors. Text
// nested deeper than max_depth arrays/objects is refused before parsing: every JSON
// file this project reads is a few levels deep, and a hostile one nested 100,000 deep
// would otherwise overflow the stack in the recursive code that walks or prints it.
constexpr int kMaxJsonDepth = 64;
nlohmann::json parse_json(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);
// Only the depth check, for callers that parse leniently themselves.
void check_json_depth(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);

// An exclusive lock on a directory (flock on DIR/.lock) for as long as the object
// lives, so that two runs cannot write one run directory. Error naming the directory
// (and the holder's pid) when another process holds it. Taking it also removes temp
// files that a killed writer left in the directory.
class DirLock {
 public:
  explicit DirLock(const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

// "[2, 3, 4]".
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace gmlp

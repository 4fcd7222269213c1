#pragma once
// Whole-file reading, atomic writing and shape formatting: one implementation each,
// used by checkpoints, configs, corpora, images and logs.
#include <cstdint>
#include <string>
#include <vector>

namespace gmlp {

// Reads a whole regular file; Error naming the path when it cannot (missing, a
// directory, unreadable).
std::string read_file(const std::string& path);
// Writes bytes to path atomically: a temp file beside it, fsync, rename, fsync of the
// directory, so a crash leaves either the old file or the new one.
void write_file_atomic(const std::string& path, const std::string& bytes);
// "[2, 3, 4]".
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace gmlp

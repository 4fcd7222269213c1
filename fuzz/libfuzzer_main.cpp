// libFuzzer entry point for one reader (readers.h), chosen at compile time by
// GMLP_FUZZ_TARGET. Each input is written to a file and its path handed to the reader,
// as the CLI does. Built by scripts/fuzz.sh.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "gmlp/error.h"
#include "readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/gmlp_fuzz_" + std::to_string(::getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    gmlp::fuzz::read_as(GMLP_FUZZ_TARGET, path);
  } catch (const gmlp::Error&) {
    // A clear refusal is the expected answer to a malformed file.
  }
  return 0;
}

// libFuzzer targets for every reader of untrusted files (docs/reliability.md). Each
// target writes the input to a file and hands its path to the reader, as the CLI does.
// A reader may refuse any input with gmlp::Error; any other exception, a crash, a
// sanitizer report, a leak or a timeout is a finding. Built by scripts/fuzz.sh; one
// binary per target, chosen at compile time by GMLP_FUZZ_TARGET.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "gmlp/config.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/image.h"
#include "gmlp/labelled.h"
#include "gmlp/safetensors.h"
#include "gmlp/tokenizer.h"

namespace {

const std::string& input_path() {
  static const std::string p = "/tmp/gmlp_fuzz_" + std::to_string(::getpid());
  return p;
}

void run_reader(const std::string& path) {
  using namespace gmlp;
  const std::string target = GMLP_FUZZ_TARGET;
  if (target == "safetensors") {
    const auto f = SafeTensorsFile::load(path);
    for (const auto& name : f.names()) {
      const auto& t = f.info(name);
      if (t.dtype == "F32") (void)f.read_f32(name);
      if (t.dtype == "I32" || t.dtype == "I64") (void)f.read_int(name);
    }
  } else if (target == "config") {
    (void)RunConfig::load(path).to_json().dump();
  } else if (target == "tokenizer") {
    const auto tok = tokenizer_from_json(parse_json(read_file(path), path));
    for (const int32_t id : tok->encode("In the beginning God created the heaven and the earth."))
      (void)tok->decode(id);
  } else if (target == "idx") {
    (void)read_idx(path);
  } else if (target == "image") {
    (void)read_image(path);
  } else if (target == "labelled") {
    (void)load_labelled(path);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(input_path().c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    run_reader(input_path());
  } catch (const gmlp::Error&) {
    // A clear refusal is the expected answer to a malformed file.
  }
  return 0;
}

// The readers of untrusted files by name (readers.h).
#include "readers.h"

#include <cstdint>
#include <string>

#include "gmlp/config.h"
#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/image.h"
#include "gmlp/labelled.h"
#include "gmlp/safetensors.h"
#include "gmlp/tokenizer.h"

namespace gmlp::fuzz {

const std::vector<std::string>& targets() {
  static const std::vector<std::string> t = {"safetensors", "config", "tokenizer", "idx", "image", "labelled"};
  return t;
}

void read_as(const std::string& target, const std::string& path) {
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
  } else {
    throw std::invalid_argument("unknown fuzz target '" + target + "'");
  }
}

}  // namespace gmlp::fuzz

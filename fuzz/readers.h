#pragma once
// The readers of untrusted files, by name, for the fuzzers (docs/reliability.md): the
// libFuzzer targets (libfuzzer_main.cpp, scripts/fuzz.sh) and the project's own
// mutation harness (mutate_main.cpp, run by CTest).
#include <string>
#include <vector>

namespace gmlp::fuzz {

// safetensors, config, tokenizer, idx, image, labelled.
const std::vector<std::string>& targets();

// Reads the file at path as `target` reads it in the CLI, touching everything it
// returns. A malformed file must end in gmlp::Error; anything else (another exception,
// a crash, a sanitizer report, a hang) is a finding.
void read_as(const std::string& target, const std::string& path);

}  // namespace gmlp::fuzz

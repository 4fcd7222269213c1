#pragma once
// The library reports every failure as gmlp::Error; only tools/ turns it into an exit code.
#include <stdexcept>
#include <string>
#include <type_traits>

namespace gmlp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws Error(msg) when cond is false. For validating inputs, not internal invariants.
inline void require(bool cond, const std::string& msg) {
  if (!cond) throw Error(msg);
}

// The same with the message built only on failure: for checks made per value (every
// token of a batch, every pixel of a file), where building each message first cost more
// than the work it checked. The annotated LM's step checked its 8,192 tokens and targets
// so: 0.6 ms of host time a step, on the host before the step's first launch, while a GPU
// waited; without the strings, 0.02 ms (docs/bench-gpu.md, "The host's side of a step").
template <typename Message>
requires std::is_invocable_r_v<std::string, Message&>
inline void require(bool cond, Message&& msg) {
  if (!cond) [[unlikely]]
    throw Error(msg());
}

}  // namespace gmlp

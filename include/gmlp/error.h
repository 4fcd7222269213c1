#pragma once
// The library reports every failure as gmlp::Error; only tools/ turns it into an exit code.
#include <stdexcept>
#include <string>

namespace gmlp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws Error(msg) when cond is false. For validating inputs, not internal invariants.
inline void require(bool cond, const std::string& msg) {
  if (!cond) throw Error(msg);
}

}  // namespace gmlp

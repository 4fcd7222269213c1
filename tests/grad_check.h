#pragma once
// Finite-difference gradient checking for the op tests (test_ops*.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace gmlp::test {

using Vec = std::vector<float>;
using Idx = std::vector<size_t>;
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline Vec uniform(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  Vec v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// buf[at[k]] - base[at[k]] (base empty: just buf[at[k]]): what a backward wrote or added.
inline Vec gather(const Vec& buf, const Idx& at, const Vec& base = {}) {
  Vec out;
  for (size_t i : at) out.push_back(buf[i] - (base.empty() ? 0.f : base[i]));
  return out;
}

inline bool all_finite(const Vec& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

struct Tol {
  double atol = 1e-3, rtol = 1e-2;
};

// Central differences of loss() with respect to x[at[k]], against analytic[k]. loss()
// reruns the forward from the current x; the step is the float difference actually made.
inline ::testing::AssertionResult grad_check(Vec& x, const Idx& at, const Vec& analytic,
                                             const std::function<double()>& loss, const std::string& what,
                                             Tol tol = {}, float h = 1e-2f) {
  if (at.size() != analytic.size())
    return ::testing::AssertionFailure() << what << ": " << at.size() << " indices, " << analytic.size() << " values";
  size_t bad = 0;
  std::ostringstream first;
  for (size_t k = 0; k < at.size(); ++k) {
    float& xi = x[at[k]];
    const float x0 = xi, xp = x0 + h, xm = x0 - h;
    xi = xp;
    const double lp = loss();
    xi = xm;
    const double lm = loss();
    xi = x0;
    const double num = (lp - lm) / (double(xp) - double(xm));
    if (!(std::fabs(analytic[k] - num) <= tol.atol + tol.rtol * std::fabs(num)) && bad++ == 0)  // NaN fails
      first << "first at element " << at[k] << ": analytic " << analytic[k] << ", numeric " << num;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << at.size() << " gradients off; "
                                       << first.str();
}

}  // namespace gmlp::test

#pragma once
// A one-line progress bar (step, loss, tokens/s, ETA) on a terminal; on anything
// else (a log file, CI) plain lines at each update instead of carriage returns.
#include <chrono>
#include <cstdint>
#include <string>

namespace gmlp {

class Progress {
 public:
  // unit: what the throughput counts ("tokens", "images", ...).
  Progress(int64_t total, bool live, const std::string& unit = "tokens");
  void update(int64_t step, double loss, double tokens_per_s);
  void note(const std::string& line);  // a message above the bar
  void finish();

 private:
  int64_t total_;
  bool live_;
  bool drawn_ = false;
  int64_t start_step_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::string last_;
  std::string unit_;
};

std::string format_duration(double seconds);

}  // namespace gmlp

#include "gmlp/progress.h"

#include <cstdio>

namespace gmlp {

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  const long t = long(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

Progress::Progress(int64_t total, bool live, const std::string& unit)
    : total_(total), live_(live), start_(std::chrono::steady_clock::now()),
      unit_(unit == "tokens" ? "tok" : unit == "images" ? "img" : unit) {}

void Progress::update(int64_t step, double loss, double tps) {
  const auto now = std::chrono::steady_clock::now();
  if (start_step_ < 0) {
    start_step_ = step;
    start_ = now;
  }
  // ETA from the pace since the first update, which includes evaluation and checkpoints.
  const double dt = std::chrono::duration<double>(now - start_).count();
  const double per_step = step > start_step_ ? dt / double(step - start_step_) : 0.0;
  const std::string eta = per_step > 0 ? format_duration(per_step * double(total_ - step)) : "?";
  char line[256];
  if (live_) {
    constexpr int kWidth = 24;
    const int fill = total_ > 0 ? int(kWidth * step / total_) : kWidth;
    std::string bar(size_t(fill), '#');
    bar.resize(kWidth, '.');
    std::snprintf(line, sizeof line, "\r[%s] step %lld/%lld  loss %.4f  %.0f %s/s  ETA %s\033[K", bar.c_str(),
                  (long long)step, (long long)total_, loss, tps, unit_.c_str(), eta.c_str());
    std::fputs(line, stderr);
    drawn_ = true;
  } else {
    std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  %.0f %s/s  ETA %s\n", (long long)step,
                  (long long)total_, loss, tps, unit_.c_str(), eta.c_str());
    std::fputs(line, stderr);
  }
  last_ = line;
  std::fflush(stderr);
}

void Progress::note(const std::string& msg) {
  if (live_ && drawn_) {
    std::fprintf(stderr, "\r\033[K%s\n%s", msg.c_str(), last_.c_str());
  } else {
    std::fprintf(stderr, "%s\n", msg.c_str());
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (live_ && drawn_) std::fputs("\n", stderr);
  drawn_ = false;
}

}  // namespace gmlp

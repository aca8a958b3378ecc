#include "streamrl/telemetry/progress.h"

#include <unistd.h>

#include <cstdio>

namespace streamrl::telemetry {

Progress::Progress(std::string label, int64_t total, double line_interval_s)
    : label_(std::move(label)),
      total_(total),
      tty_(isatty(STDERR_FILENO) == 1),
      interval_s_(line_interval_s),
      start_(std::chrono::steady_clock::now()),
      last_line_(start_) {}

Progress::~Progress() {
  if (!finished_) finish(status_);
}

void Progress::update(int64_t done, const std::string& status) {
  done_ = done;
  status_ = status;
  auto now = std::chrono::steady_clock::now();
  if (tty_) {
    draw(false);
  } else if (std::chrono::duration<double>(now - last_line_).count() >= interval_s_) {
    last_line_ = now;
    draw(false);
  }
}

void Progress::finish(const std::string& status) {
  if (finished_) return;
  finished_ = true;
  status_ = status;
  draw(true);
}

void Progress::draw(bool final_line) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_ > 0 ? static_cast<double>(done_) / total_ : 1.0;
  const double eta = frac > 0 ? elapsed * (1 - frac) / frac : 0;
  if (tty_) {
    const int width = 24;
    const int filled = static_cast<int>(frac * width);
    std::string bar(filled, '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r\033[K%s [%s] %lld/%lld %.0fs eta %.0fs %s%s", label_.c_str(),
                 bar.c_str(), static_cast<long long>(done_), static_cast<long long>(total_),
                 elapsed, eta, status_.c_str(), final_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s %lld/%lld (%.0f%%) %.0fs eta %.0fs %s\n", label_.c_str(),
                 static_cast<long long>(done_), static_cast<long long>(total_), 100 * frac, elapsed,
                 eta, status_.c_str());
  }
  std::fflush(stderr);
}

}  // namespace streamrl::telemetry

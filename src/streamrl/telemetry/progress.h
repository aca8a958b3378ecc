// Progress display for long work: a redrawn bar on a terminal, plain periodic lines otherwise
// (CI logs, pipes), so both stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace streamrl::telemetry {

class Progress {
 public:
  // `total` units of work labelled `label`. On a non-terminal stderr a line is printed at most
  // every `line_interval_s` seconds (and at the end).
  Progress(std::string label, int64_t total, double line_interval_s = 10.0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Sets the completed count and a short status text (e.g. "loss 1.23").
  void update(int64_t done, const std::string& status = "");
  // Final line; called by the destructor if not called before.
  void finish(const std::string& status = "");

 private:
  void draw(bool final_line);

  std::string label_;
  int64_t total_;
  int64_t done_ = 0;
  std::string status_;
  bool tty_;
  bool finished_ = false;
  double interval_s_;
  std::chrono::steady_clock::time_point start_, last_line_;
};

}  // namespace streamrl::telemetry

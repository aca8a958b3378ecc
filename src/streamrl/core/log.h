// Minimal leveled logging to stderr. Lines are plain text so they read well in CI logs.
#pragma once

#include <sstream>
#include <string>

namespace streamrl::core {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Messages below this level are dropped. Default kInfo; STREAMRL_LOG=debug|info|warn|error sets it.
void set_log_level(LogLevel level);
LogLevel log_level();

// Thread-safe: one whole line per call.
void log_line(LogLevel level, const std::string& message);

}  // namespace streamrl::core

// Usage: SLOG(kInfo) << "loaded " << n << " tensors";
#define SLOG(level)                                                                          \
  for (bool _slog_once = ::streamrl::core::LogLevel::level >= ::streamrl::core::log_level(); \
       _slog_once; _slog_once = false)                                                       \
  ::streamrl::core::detail::LogStream(::streamrl::core::LogLevel::level).stream()

namespace streamrl::core::detail {
class LogStream {
 public:
  explicit LogStream(LogLevel level) : level_(level) {}
  ~LogStream() { log_line(level_, ss_.str()); }
  std::ostringstream& stream() { return ss_; }

 private:
  LogLevel level_;
  std::ostringstream ss_;
};
}  // namespace streamrl::core::detail

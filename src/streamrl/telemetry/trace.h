// Chrome Trace Event Format timelines (trace.json), viewable in Perfetto or chrome://tracing: one
// track per role (SGS instance, trainer rank) with complete ("X") spans, so pipeline and skewness
// bubbles are visible as gaps.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace streamrl::telemetry {

class Trace {
 public:
  using Clock = std::chrono::steady_clock;

  // Times are microseconds since `origin`. The wall-clock time of the origin is kept too, so
  // traces of other processes can be merged onto one timeline. At most `max_spans` spans are
  // kept, the oldest dropped first (a long run's trace stays bounded; the end is what reports
  // show); track names are always kept.
  explicit Trace(Clock::time_point origin = Clock::now(), size_t max_spans = kDefaultMaxSpans);
  static constexpr size_t kDefaultMaxSpans = 200000;  // ~30 MB of JSON

  // Names a track (a "thread" in the viewer); spans on an unnamed track show its number.
  void name_track(int track, const std::string& name);

  // Records a span [begin, end) on `track`. Thread-safe.
  void span(int track, const std::string& name, Clock::time_point begin, Clock::time_point end,
            nlohmann::json args = nullptr);

  size_t size() const;     // spans kept
  size_t dropped() const;  // spans dropped to stay within max_spans

  // The whole trace as a Trace Event Format object.
  nlohmann::json to_json() const;

  // Writes to_json() atomically to `path`.
  void write(const std::filesystem::path& path) const;

  // Adds the events recorded since the last flush to `path`, so each call costs its new events
  // only. The first flush to a path (or after the file was replaced, as by write()) writes the
  // whole trace atomically; later ones overwrite the file's tail (what follows the traceEvents
  // array) with the new events and a new tail. After every flush the file is a complete trace
  // with to_json()'s events (track names recorded later follow earlier spans) and, until it is
  // next rewritten, older spans max_spans has since dropped from memory; its dropped_spans counts
  // the spans that never reached it. Once it would hold more than 2 * max_spans spans it is
  // rewritten with the kept ones, which bounds it as the trace is. A reader during a flush may
  // see the file cut short. Throws RuntimeFailure on I/O errors.
  void flush(const std::filesystem::path& path);

  // Adds the events of another process's trace (its own track numbers, which must not collide
  // with ours), shifted onto this trace's origin by the two origins' wall-clock times (across
  // hosts, as close as their clocks agree). InputError when it is not a trace, or for
  // merge_file, the file is missing.
  void merge(nlohmann::json other);
  void merge_file(const std::filesystem::path& path);

  // A trace.json read back, for reports: its spans (events of phase "X") and track names.
  struct Contents {
    std::vector<nlohmann::json> spans;
    std::map<int, std::string> track_names;
  };
  static Contents read(const std::filesystem::path& path);

 private:
  // Where flush() left its file.
  struct Flushed {
    std::filesystem::path path;
    std::array<uint64_t, 3> stamp{};  // its device, inode and size as flush() left it
    uintmax_t events_end = 0;         // offset of the ']' that closes traceEvents
    size_t names = 0;                 // names_ in the file
    uint64_t next_span = 0;  // recorded_ when it was flushed: later spans are not in the file
    size_t spans = 0;        // spans in the file
    size_t lost = 0;         // spans dropped before they reached the file
  };

  void add_span_locked(nlohmann::json e);
  nlohmann::json metadata(size_t dropped) const;  // everything but traceEvents
  Clock::time_point origin_;
  double origin_unix_us_;  // wall-clock microseconds of origin_
  size_t max_spans_;
  mutable std::mutex mu_;
  std::vector<nlohmann::json> names_;  // thread_name metadata events
  std::deque<nlohmann::json> spans_;   // the last spans_.size() of recorded_
  uint64_t recorded_ = 0;              // spans ever recorded
  size_t dropped_ = 0;
  std::mutex flush_mu_;  // serialises flush(); guards flushed_
  std::optional<Flushed> flushed_;
};

// A span that records itself when it goes out of scope; a null trace records nothing.
class ScopedSpan {
 public:
  ScopedSpan(Trace* trace, int track, std::string name)
      : trace_(trace), track_(track), name_(std::move(name)), begin_(Trace::Clock::now()) {}
  ~ScopedSpan() {
    if (trace_) trace_->span(track_, name_, begin_, Trace::Clock::now(), std::move(args_));
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
  nlohmann::json& args() { return args_; }

 private:
  Trace* trace_;
  int track_;
  std::string name_;
  Trace::Clock::time_point begin_;
  nlohmann::json args_;
};

}  // namespace streamrl::telemetry

#include "streamrl/telemetry/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::telemetry {
namespace {

double micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

bool is_trace(const nlohmann::json& j) {
  return j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array();
}

nlohmann::json read_trace_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot open trace " + path.string());
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!is_trace(j)) {
    throw InputError(path.string() + ": not a Trace Event Format file (no traceEvents array)");
  }
  return j;
}

// Appends `events` to `out`, comma-separated, after `before` events already there.
void join_events(std::string& out, size_t before, const std::vector<nlohmann::json>& events) {
  for (const auto& e : events) {
    if (before++ > 0) out += ',';
    out += e.dump();
  }
}

// Overwrites `path` from `offset` on with `bytes` and cuts the file after them.
void write_tail(const std::filesystem::path& path, uintmax_t offset, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  const auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw RuntimeFailure(what + " " + path.string() + ": " + why);
  };
  if (fd < 0) fail("cannot open");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write failed for");
    done += static_cast<size_t>(n);
  }
  if (::ftruncate(fd, static_cast<off_t>(offset + bytes.size())) != 0) fail("cannot truncate");
  if (::close(fd) != 0) {
    throw RuntimeFailure("write failed for " + path.string() + ": " + std::strerror(errno));
  }
}

// Device, inode and size of `path` (zeros when it is missing): a rename over the file, as
// write_file_atomic does, or a writer that changes its length changes them.
std::array<uint64_t, 3> file_stamp(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {0, 0, 0};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
          static_cast<uint64_t>(st.st_size)};
}

}  // namespace

Trace::Trace(Clock::time_point origin, size_t max_spans)
    : origin_(origin), max_spans_(std::max<size_t>(1, max_spans)) {
  // The unix time of `origin`: the system clock read between two steady-clock reads, the
  // tightest bracket of a few tries, so a preemption between two reads does not shift the origin
  // (traces of several processes are merged on it).
  double tightest = std::numeric_limits<double>::infinity();
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto before = Clock::now();
    const auto now_unix = std::chrono::system_clock::now().time_since_epoch();
    const auto after = Clock::now();
    if (micros(after - before) >= tightest) continue;
    tightest = micros(after - before);
    origin_unix_us_ = std::chrono::duration<double, std::micro>(now_unix).count() -
                      micros(before - origin) - tightest / 2;
  }
}

void Trace::name_track(int track, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  names_.push_back({{"ph", "M"},
                    {"name", "thread_name"},
                    {"pid", 1},
                    {"tid", track},
                    {"args", {{"name", name}}}});
}

void Trace::span(int track, const std::string& name, Clock::time_point begin, Clock::time_point end,
                 nlohmann::json args) {
  nlohmann::json e = {{"ph", "X"},
                      {"name", name},
                      {"pid", 1},
                      {"tid", track},
                      {"ts", micros(begin - origin_)},
                      {"dur", micros(end - begin)}};
  if (!args.is_null()) e["args"] = std::move(args);
  std::lock_guard<std::mutex> lock(mu_);
  add_span_locked(std::move(e));
}

void Trace::add_span_locked(nlohmann::json e) {
  spans_.push_back(std::move(e));
  ++recorded_;
  if (spans_.size() > max_spans_) {
    spans_.pop_front();
    ++dropped_;
  }
}

size_t Trace::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_.size();
}

size_t Trace::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

nlohmann::json Trace::metadata(size_t dropped) const {
  return {{"displayTimeUnit", "ms"},
          {"otherData", {{"origin_unix_us", origin_unix_us_}, {"dropped_spans", dropped}}}};
}

nlohmann::json Trace::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json j = metadata(dropped_);
  nlohmann::json& events = j["traceEvents"] = names_;
  for (const auto& e : spans_) events.push_back(e);
  return j;
}

void Trace::write(const std::filesystem::path& path) const {
  core::write_file_atomic(path, to_json().dump());
}

void Trace::flush(const std::filesystem::path& path) {
  std::lock_guard<std::mutex> flush_lock(flush_mu_);
  const bool appendable = flushed_ && flushed_->path == path && file_stamp(path) == flushed_->stamp;
  Flushed next;
  std::vector<nlohmann::json> fresh;  // events not in the file yet
  std::string tail;                   // what follows traceEvents' ']'
  bool whole = !appendable;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t first_kept = recorded_ - spans_.size();
    if (appendable) {
      next = *flushed_;
      const uint64_t from = std::max(next.next_span, first_kept);
      whole = next.spans + (recorded_ - from) > 2 * max_spans_;
      if (!whole) {
        fresh.assign(names_.begin() + static_cast<std::ptrdiff_t>(next.names), names_.end());
        fresh.insert(fresh.end(), spans_.begin() + static_cast<std::ptrdiff_t>(from - first_kept),
                     spans_.end());
        next.spans += recorded_ - from;
        next.lost += from - next.next_span;
      }
    }
    if (whole) {
      next = Flushed{path, {}, 0, 0, 0, spans_.size(), dropped_};
      fresh = names_;
      fresh.insert(fresh.end(), spans_.begin(), spans_.end());
    }
    next.names = names_.size();
    next.next_span = recorded_;
    // The metadata follows the events, so an append rewrites only what comes after them.
    tail = "," + metadata(next.lost).dump().substr(1);
  }
  if (!whole && fresh.empty() && next.lost == flushed_->lost) return;
  std::string text;
  if (whole) {
    text = R"({"traceEvents":[)";
    join_events(text, 0, fresh);
    next.events_end = text.size();
    text += ']' + tail;
    core::write_file_atomic(path, text);
  } else {
    join_events(text, flushed_->names + flushed_->spans, fresh);
    next.events_end = flushed_->events_end + text.size();
    text += ']' + tail;
    write_tail(path, flushed_->events_end, text);
  }
  next.stamp = file_stamp(path);
  flushed_ = std::move(next);
}

void Trace::merge_file(const std::filesystem::path& path) { merge(read_trace_json(path)); }

void Trace::merge(nlohmann::json j) {
  if (!is_trace(j)) {
    throw InputError("not a trace (no traceEvents array)");
  }
  const double origin = j.contains("otherData")
                            ? j["otherData"].value("origin_unix_us", origin_unix_us_)
                            : origin_unix_us_;
  const double shift = origin - origin_unix_us_;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : j["traceEvents"]) {
    if (e.value("ph", "") == "M") {
      names_.push_back(std::move(e));
      continue;
    }
    if (e.contains("ts")) e["ts"] = e["ts"].get<double>() + shift;
    add_span_locked(std::move(e));
  }
}

Trace::Contents Trace::read(const std::filesystem::path& path) {
  nlohmann::json j = read_trace_json(path);
  Contents c;
  for (auto& e : j["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    if (ph == "X") {
      c.spans.push_back(std::move(e));
    } else if (ph == "M" && e.contains("args")) {
      c.track_names[e.value("tid", 0)] = e["args"].value("name", "");
    }
  }
  return c;
}

}  // namespace streamrl::telemetry

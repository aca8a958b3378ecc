#include "streamrl/telemetry/trace.h"

#include <algorithm>
#include <fstream>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::telemetry {
namespace {

double micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

nlohmann::json read_trace_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot open trace " + path.string());
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array()) {
    throw InputError(path.string() + ": not a Trace Event Format file (no traceEvents array)");
  }
  return j;
}

}  // namespace

Trace::Trace(Clock::time_point origin, size_t max_spans)
    : origin_(origin), max_spans_(std::max<size_t>(1, max_spans)) {
  const auto now_unix = std::chrono::system_clock::now().time_since_epoch();
  origin_unix_us_ =
      std::chrono::duration<double, std::micro>(now_unix).count() - micros(Clock::now() - origin);
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

nlohmann::json Trace::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json events = names_;
  for (const auto& e : spans_) events.push_back(e);
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"origin_unix_us", origin_unix_us_}, {"dropped_spans", dropped_}}}};
}

void Trace::write(const std::filesystem::path& path) const {
  core::write_file_atomic(path, to_json().dump());
}

void Trace::merge_file(const std::filesystem::path& path) {
  nlohmann::json j = read_trace_json(path);
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

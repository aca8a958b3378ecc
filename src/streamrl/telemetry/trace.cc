#include "streamrl/telemetry/trace.h"

#include <fstream>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"

namespace streamrl::telemetry {
namespace {

double micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace

void Trace::name_track(int track, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({{"ph", "M"},
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
  events_.push_back(std::move(e));
}

size_t Trace::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

nlohmann::json Trace::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {{"traceEvents", events_}, {"displayTimeUnit", "ms"}};
}

void Trace::write(const std::filesystem::path& path) const {
  core::write_file_atomic(path, to_json().dump());
}

Trace::Contents Trace::read(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot open trace " + path.string());
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array()) {
    throw InputError(path.string() + ": not a Trace Event Format file (no traceEvents array)");
  }
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

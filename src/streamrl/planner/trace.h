// A Chrome Trace Event Format timeline (the JSON that Perfetto and chrome://tracing open) of an
// emulated run: one process per role, one thread track per generation instance or trainer.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace streamrl::planner {

class TraceWriter {
 public:
  // Names a track (pid, tid) once; later calls for the same track are ignored.
  void name_track(int pid, const std::string& process, int tid, const std::string& thread);
  // A complete event ("ph": "X") from `start_s` lasting `seconds`, in microseconds in the file.
  void span(int pid, int tid, const std::string& name, double start_s, double seconds,
            nlohmann::json args = nlohmann::json::object());
  // {"traceEvents": [...], "displayTimeUnit": "ms"}
  nlohmann::json to_json() const;
  size_t size() const { return events_.size(); }

 private:
  nlohmann::json events_ = nlohmann::json::array();
  nlohmann::json named_ = nlohmann::json::object();
};

}  // namespace streamrl::planner

#include "streamrl/planner/trace.h"

namespace streamrl::planner {

void TraceWriter::name_track(int pid, const std::string& process, int tid,
                             const std::string& thread) {
  const std::string key = std::to_string(pid) + "/" + std::to_string(tid);
  if (named_.contains(key)) return;
  named_[key] = true;
  const std::string pkey = std::to_string(pid);
  if (!named_.contains(pkey)) {
    named_[pkey] = true;
    events_.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", process}}}});
  }
  events_.push_back({{"ph", "M"},
                     {"name", "thread_name"},
                     {"pid", pid},
                     {"tid", tid},
                     {"args", {{"name", thread}}}});
}

void TraceWriter::span(int pid, int tid, const std::string& name, double start_s, double seconds,
                       nlohmann::json args) {
  events_.push_back({{"ph", "X"},
                     {"name", name},
                     {"pid", pid},
                     {"tid", tid},
                     {"ts", start_s * 1e6},
                     {"dur", seconds * 1e6},
                     {"args", std::move(args)}});
}

nlohmann::json TraceWriter::to_json() const {
  return {{"traceEvents", events_}, {"displayTimeUnit", "ms"}};
}

}  // namespace streamrl::planner

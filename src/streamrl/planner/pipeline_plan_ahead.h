// Planning ahead (PipeWeaver/DIP, arXiv 2504.14145): the plan for iteration k+1 is computed on a
// background thread while iteration k trains, so planning time is off the critical path. One
// thread, one PipelineEmulator (its memo persists across batches); batches are planned in the
// order they are submitted. Each batch records how long planning took and how much of it was
// hidden: the planning time that ran before the caller asked for the plan, versus the time the
// caller then waited for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "streamrl/pipeline/partition.h"
#include "streamrl/planner/pipeline_emulator.h"
#include "streamrl/planner/pipeline_plan.h"

namespace streamrl::planner {

struct PlanAheadOptions {
  double take_timeout_s = 60;  // how long take() waits by default
};

// Per batch, filled in by take().
struct PlanAheadTiming {
  double planning_s = 0;  // wall time of plan_pipeline
  double hidden_s = 0;    // planning time that ran before take() was called
  double blocked_s = 0;   // time take() waited (queueing behind earlier batches included)
  // hidden_s / planning_s (1 when planning took no measurable time).
  double hidden_share() const { return planning_s > 0 ? hidden_s / planning_s : 1.0; }
};

// Thread-safe: submit() and take() may be called from any thread. The destructor drops batches
// not yet started, waits for the one being planned, and joins the thread.
class PipelinePlanAhead {
 public:
  PipelinePlanAhead(PipelineProfile profile, pipeline::Partition partition,
                    PipelinePlanOptions options, PlanAheadOptions ahead = {});
  ~PipelinePlanAhead();
  PipelinePlanAhead(const PipelinePlanAhead&) = delete;
  PipelinePlanAhead& operator=(const PipelinePlanAhead&) = delete;

  // Queues `lengths` for planning, with the constructor's options or `options` (e.g. a memory
  // budget or token target of this batch's own) and its profile or `profile` (e.g. one refitted
  // to the steps run so far). InputError when `batch_id` is already submitted and not yet taken.
  // Input errors of the batch itself (e.g. no sequences) surface from take().
  void submit(int64_t batch_id, std::vector<int64_t> lengths,
              std::optional<PipelinePlanOptions> options = std::nullopt,
              std::optional<PipelineProfile> profile = std::nullopt);

  // The plan of `batch_id`, waiting up to `timeout_s` (PlanAheadOptions::take_timeout_s when
  // negative). Throws InputError for a batch never submitted (or already taken), TimeoutError
  // when the plan is not ready in time (the batch stays pending and can be taken later), and
  // rethrows whatever plan_pipeline threw. The batch is forgotten once taken, its timing kept.
  PipelinePlan take(int64_t batch_id, double timeout_s = -1);

  // For a caller that knows the batch it is about to run only by its lengths: the plan of the
  // oldest pending batch submitted with exactly `lengths` (waiting as take() does), after dropping
  // every batch submitted before it (their plans and errors discarded: they will not run).
  // nullopt, dropping nothing, when no pending batch matches. `batch_id` gets the match's id.
  std::optional<PipelinePlan> take_matching(const std::vector<int64_t>& lengths,
                                            int64_t* batch_id = nullptr, double timeout_s = -1);

  // The timing of a taken batch (nullopt when not taken yet).
  std::optional<PlanAheadTiming> timing(int64_t batch_id) const;
  // Batches submitted and not yet taken.
  size_t pending() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::vector<int64_t> lengths;  // kept for take_matching()
    PipelinePlanOptions options;
    std::optional<PipelineProfile> profile;  // instead of profile_
    bool done = false;
    PipelinePlan plan;
    std::exception_ptr error;
    Clock::time_point start, end;  // of planning
  };

  void worker();

  const PipelineProfile profile_;
  const pipeline::Partition partition_;
  const PipelinePlanOptions options_;
  const PlanAheadOptions ahead_;
  PipelineEmulator emulator_;  // used only by the worker thread

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<int64_t> queue_;      // submitted, not started
  std::deque<int64_t> submitted_;  // submitted, not taken, oldest first
  std::map<int64_t, Entry> entries_;
  std::map<int64_t, PlanAheadTiming> timings_;
  bool stop_ = false;
  std::thread thread_;  // last: started once every member above exists
};

}  // namespace streamrl::planner

#include "streamrl/ep/comm_scheduler.h"

#include <algorithm>

#include "streamrl/core/errors.h"

namespace streamrl::ep {

Policy parse_policy(const std::string& name) {
  if (name == "fair_share") return Policy::kFairShare;
  if (name == "priority") return Policy::kPriority;
  if (name == "lina") return Policy::kPartitioned;
  throw InputError("unknown communication policy '" + name +
                   "' (expected fair_share, priority or lina)");
}

std::string policy_name(Policy policy) {
  switch (policy) {
    case Policy::kFairShare:
      return "fair_share";
    case Policy::kPriority:
      return "priority";
    case Policy::kPartitioned:
      return "lina";
  }
  return "?";
}

std::vector<MicroOp> partition(OpKind kind, int tensor, int64_t total, int64_t chunk,
                               int64_t bytes_per_unit) {
  if (total < 0 || bytes_per_unit <= 0) {
    throw InputError("partition: a tensor needs a size >= 0 and bytes per unit > 0");
  }
  if (chunk <= 0) chunk = std::max<int64_t>(1, total);
  std::vector<MicroOp> ops;
  for (int64_t begin = 0, i = 0; begin < total; begin += chunk, ++i) {
    const int64_t n = std::min(chunk, total - begin);
    ops.push_back({kind, tensor, static_cast<int>(i), begin * bytes_per_unit, n * bytes_per_unit});
  }
  return ops;
}

CommScheduler::CommScheduler(SchedulerOptions options) : options_(options) {}

int CommScheduler::submit_all_reduce(int tensor, int64_t bytes) {
  // Only Lina partitions; the others launch each gradient whole. Chunks never mix gradients.
  const int64_t chunk =
      options_.policy == Policy::kPartitioned ? options_.all_reduce_chunk_bytes : 0;
  const std::vector<MicroOp> ops = partition(OpKind::kAllReduce, tensor, bytes, chunk);
  all_reduce_.insert(all_reduce_.end(), ops.begin(), ops.end());
  return static_cast<int>(ops.size());
}

int CommScheduler::submit_all_to_all(int tensor, int64_t tokens, int64_t bytes_per_token) {
  const int64_t chunk =
      options_.policy == Policy::kPartitioned ? options_.all_to_all_chunk_tokens : 0;
  const std::vector<MicroOp> ops =
      partition(OpKind::kAllToAll, tensor, tokens, chunk, bytes_per_token);
  all_to_all_.insert(all_to_all_.end(), ops.begin(), ops.end());
  return static_cast<int>(ops.size());
}

std::vector<MicroOp> CommScheduler::launch() {
  std::vector<MicroOp> out;
  if (!all_to_all_running_ && !all_to_all_.empty()) {
    out.push_back(all_to_all_.front());
    all_to_all_.pop_front();
    all_to_all_running_ = true;
  }
  bool may_reduce = !all_reduce_running_ && !all_reduce_.empty();
  if (options_.policy != Policy::kFairShare) {
    // An all-to-all waiting or running goes first; an all-reduce already launched cannot be
    // pre-empted, which is why Lina cuts it into chunks.
    may_reduce = may_reduce && !all_to_all_running_ && all_to_all_.empty();
  }
  if (options_.policy == Policy::kPartitioned) may_reduce = may_reduce && !combine_running_;
  if (may_reduce) {
    out.push_back(all_reduce_.front());
    all_reduce_.pop_front();
    all_reduce_running_ = true;
  }
  return out;
}

void CommScheduler::completed(const MicroOp& op) {
  (op.kind == OpKind::kAllToAll ? all_to_all_running_ : all_reduce_running_) = false;
}

bool CommScheduler::idle() const {
  return all_to_all_.empty() && all_reduce_.empty() && !all_to_all_running_ && !all_reduce_running_;
}

}  // namespace streamrl::ep

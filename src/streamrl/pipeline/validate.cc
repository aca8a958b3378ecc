#include "streamrl/pipeline/validate.h"

#include <map>
#include <tuple>
#include <vector>

namespace streamrl::pipeline {
namespace {

std::string at(int stage, int index, const Op& op) {
  return "stage " + std::to_string(stage) + " op " + std::to_string(index) + " (" + describe(op) +
         ")";
}

// Dense index of (kind, micro-batch, chunk) within one stage.
int slot(const Schedule& s, const Op& op) {
  return ((op.kind == OpKind::kForward ? 0 : 1) * s.micro_batches + op.micro_batch) * s.chunks +
         op.chunk;
}

std::string check_shape(const Schedule& s) {
  if (s.stages < 1 || s.chunks < 1 || s.micro_batches < 1) {
    return "needs stages, chunks and micro-batches >= 1 (got " + std::to_string(s.stages) + ", " +
           std::to_string(s.chunks) + ", " + std::to_string(s.micro_batches) + ")";
  }
  if (static_cast<int>(s.ops.size()) != s.stages) {
    return "has op lists for " + std::to_string(s.ops.size()) + " stages, not " +
           std::to_string(s.stages);
  }
  for (int stage = 0; stage < s.stages; ++stage) {
    for (size_t i = 0; i < s.ops[stage].size(); ++i) {
      const Op& op = s.ops[stage][i];
      if (op.chunk < 0 || op.chunk >= s.chunks || op.micro_batch < 0 ||
          op.micro_batch >= s.micro_batches) {
        return at(stage, static_cast<int>(i), op) + ": out of range (" +
               std::to_string(s.micro_batches) + " micro-batches, " + std::to_string(s.chunks) +
               " chunks)";
      }
    }
  }
  return "";
}

// position[stage][slot]: index of the op in its stage's list; filled by check_once.
using Positions = std::vector<std::vector<int>>;

std::string check_once(const Schedule& s, Positions& position) {
  const int slots = 2 * s.micro_batches * s.chunks;
  position.assign(s.stages, std::vector<int>(slots, -1));
  for (int stage = 0; stage < s.stages; ++stage) {
    for (size_t i = 0; i < s.ops[stage].size(); ++i) {
      const Op& op = s.ops[stage][i];
      int& p = position[stage][slot(s, op)];
      if (p >= 0) {
        return "stage " + std::to_string(stage) + " runs " + describe(op) + " twice (ops " +
               std::to_string(p) + " and " + std::to_string(i) + ")";
      }
      p = static_cast<int>(i);
    }
    for (int kind = 0; kind < 2; ++kind) {
      for (int m = 0; m < s.micro_batches; ++m) {
        for (int c = 0; c < s.chunks; ++c) {
          const Op op{kind == 0 ? OpKind::kForward : OpKind::kBackward, m, c};
          if (position[stage][slot(s, op)] < 0) {
            return "stage " + std::to_string(stage) + " never runs " + describe(op);
          }
        }
      }
    }
  }
  return "";
}

// Orders that are dependencies between two ops of one stage: a violation is a certain deadlock,
// reported here by name rather than as a circular wait.
std::string check_stage_order(const Schedule& s, const Positions& position) {
  for (int stage = 0; stage < s.stages; ++stage) {
    const std::vector<int>& pos = position[stage];
    auto before = [&](const Op& first, const Op& second) -> std::string {
      const int a = pos[slot(s, first)], b = pos[slot(s, second)];
      if (a < b) return "";
      return at(stage, b, second) + " runs before " + describe(first) + " (op " +
             std::to_string(a) + ") that it depends on";
    };
    for (int m = 0; m < s.micro_batches; ++m) {
      for (int c = 0; c < s.chunks; ++c) {
        std::string e = before({OpKind::kForward, m, c}, {OpKind::kBackward, m, c});
        if (e.empty() && c + 1 < s.chunks) {
          e = before({OpKind::kForward, m, c}, {OpKind::kForward, m, c + 1});
        }
        if (e.empty() && c + 1 < s.chunks) {
          e = before({OpKind::kBackward, m, c + 1}, {OpKind::kBackward, m, c});
        }
        if (!e.empty()) return e;
      }
    }
  }
  return "";
}

// Runs every stage's list with dependency waits (no durations): a stage advances while the
// producer of its next op has run. Stuck before the end means a circular wait.
std::string check_no_deadlock(const Schedule& s, const Positions& position) {
  std::vector<int> next(s.stages, 0);
  auto done = [&](const StagedOp& p) { return position[p.stage][slot(s, p.op)] < next[p.stage]; };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int stage = 0; stage < s.stages; ++stage) {
      const std::vector<Op>& ops = s.ops[stage];
      while (next[stage] < static_cast<int>(ops.size())) {
        const std::optional<StagedOp> p = producer(s, stage, ops[next[stage]]);
        if (p && !done(*p)) break;
        ++next[stage];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int stage = 0; stage < s.stages; ++stage) {
    if (next[stage] == static_cast<int>(s.ops[stage].size())) continue;
    const Op& op = s.ops[stage][next[stage]];
    const StagedOp p = *producer(s, stage, op);
    stuck += (stuck.empty() ? "" : "; ") + at(stage, next[stage], op) + " waits for " +
             at(p.stage, position[p.stage][slot(s, p.op)], p.op);
  }
  return stuck.empty() ? "" : "deadlock: " + stuck;
}

// Each message is (kind, micro-batch, receiving virtual stage); per directed link, the order
// the sender sends must be the order the receiver receives.
std::string check_in_order_links(const Schedule& s) {
  using Message = std::tuple<int, int, int>;
  std::map<std::pair<int, int>, std::vector<Message>> sent, received;
  for (int stage = 0; stage < s.stages; ++stage) {
    for (const Op& op : s.ops[stage]) {
      const int v = s.virtual_stage(stage, op.chunk);
      const int kind = op.kind == OpKind::kForward ? 0 : 1;
      if (const std::optional<StagedOp> p = producer(s, stage, op); p && p->stage != stage) {
        received[{p->stage, stage}].push_back({kind, op.micro_batch, v});
      }
      const int to = op.kind == OpKind::kForward ? v + 1 : v - 1;
      if (to >= 0 && to < s.virtual_stages() && s.stage_of(to) != stage) {
        sent[{stage, s.stage_of(to)}].push_back({kind, op.micro_batch, to});
      }
    }
  }
  for (const auto& [link, messages] : sent) {
    const std::vector<Message>& got = received[link];
    for (size_t i = 0; i < messages.size() && i < got.size(); ++i) {
      if (messages[i] == got[i]) continue;
      auto name = [&](const Message& m) {
        return describe({std::get<0>(m) == 0 ? OpKind::kForward : OpKind::kBackward, std::get<1>(m),
                         s.chunk_of(std::get<2>(m))});
      };
      return "link " + std::to_string(link.first) + "->" + std::to_string(link.second) +
             ": message " + std::to_string(i) + " is sent for " + name(messages[i]) +
             " but received for " + name(got[i]);
    }
  }
  return "";
}

}  // namespace

std::string validate(const Schedule& schedule, const ValidateOptions& options) {
  std::string e = check_shape(schedule);
  Positions position;
  if (e.empty()) e = check_once(schedule, position);
  if (e.empty()) e = check_stage_order(schedule, position);
  if (e.empty()) e = check_no_deadlock(schedule, position);
  if (e.empty() && options.in_order_links) e = check_in_order_links(schedule);
  return e.empty()
             ? e
             : "invalid " + (schedule.name.empty() ? "" : schedule.name + " ") + "schedule: " + e;
}

}  // namespace streamrl::pipeline

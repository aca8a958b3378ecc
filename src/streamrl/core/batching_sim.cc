#include "streamrl/core/batching_sim.h"

#include <algorithm>
#include <tuple>

#include "streamrl/core/errors.h"

namespace streamrl::core {

void BatchingSim::admit(int id, double tokens, double context) {
  if (!(tokens > 0)) throw InputError("batching simulation: a sequence needs tokens to generate");
  ids_.push_back(id);
  remaining_.push_back(tokens);
  context_.push_back(context);
}

std::pair<double, double> BatchingSim::next_chunk(double max_steps) const {
  if (ids_.empty()) throw InputError("batching simulation: no running sequence to decode");
  double steps = std::max(1.0, max_steps);
  for (double r : remaining_) steps = std::min(steps, r);
  double context = 0;
  for (double x : context_) context += x;
  const double bs = static_cast<double>(ids_.size());
  return {steps, steps * step_(bs, shared_context_ + context / bs + steps / 2.0)};
}

const BatchingSim::Chunk& BatchingSim::decode(double max_steps) {
  Chunk& c = chunk_;
  std::tie(c.steps, c.seconds) = next_chunk(max_steps);
  c.batch = running();
  // Advances every sequence and drops the finished ones, keeping admission order.
  c.finished.clear();
  size_t kept = 0;
  for (size_t i = 0; i < ids_.size(); ++i) {
    const double left = remaining_[i] - c.steps;
    if (left <= 0) {
      c.finished.push_back(ids_[i]);
      continue;
    }
    ids_[kept] = ids_[i];
    remaining_[kept] = left;
    context_[kept] = context_[i] + c.steps;
    ++kept;
  }
  ids_.resize(kept);
  remaining_.resize(kept);
  context_.resize(kept);
  return c;
}

}  // namespace streamrl::core

#include "streamrl/core/batching_sim.h"

#include <algorithm>

#include "streamrl/core/errors.h"

namespace streamrl::core {

void BatchingSim::admit(int id, double tokens, double context) {
  if (!(tokens > 0)) throw InputError("batching simulation: a sequence needs tokens to generate");
  ids_.push_back(id);
  remaining_.push_back(tokens);
  context_.push_back(context);
}

const BatchingSim::Chunk& BatchingSim::decode_to_next_completion() {
  if (ids_.empty()) throw InputError("batching simulation: no running sequence to decode");
  Chunk& c = chunk_;
  c.steps = remaining_.front();
  for (double r : remaining_) c.steps = std::min(c.steps, r);
  double context = 0;
  for (double x : context_) context += x;
  c.batch = running();
  const double bs = static_cast<double>(c.batch);
  c.seconds = c.steps * step_(bs, shared_context_ + context / bs + c.steps / 2.0);
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

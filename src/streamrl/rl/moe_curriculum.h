// The adaptive-gating paper's curriculum (Li et al., 2310.07188 §3.3) for MoE policies: a
// sequence's complexity is, per MoE layer, the share of its tokens its routers sent to two or more
// experts; sequences are ordered by the cosine similarity of that vector to the simplest
// sequence's (fewest two-expert tokens), most similar first, so simple sequences come first and
// sequences of like complexity train together (a batch waits for its most two-expert tokens).
#pragma once

#include <cstddef>
#include <vector>

#include "streamrl/engine/sample.h"

namespace streamrl::rl {

// Per MoE layer, the share of a sequence's tokens routed to two or more experts; empty when the
// sequence's routing was not observed.
using RoutingProfile = std::vector<double>;

// Indices of `profiles` in curriculum order: by cosine similarity to the anchor (the observed
// profile with the smallest sum), descending, ties by smaller sum, then by index. When the anchor
// is all zeros (a sequence on one expert everywhere) similarity is undefined and the order is by
// sum. Unobserved profiles come last, in index order.
std::vector<size_t> curriculum_order(const std::vector<RoutingProfile>& profiles);

// The profile of the tokens the engine routed for `sample` (Sample::routed_experts; a slot other
// than the first in use means two or more experts); empty when it recorded none.
RoutingProfile engine_routing_profile(const engine::Sample& sample);

}  // namespace streamrl::rl

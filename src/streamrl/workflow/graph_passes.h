// Teola's graph passes for agent rollouts. A graph's node list is in program order (every key's
// writer before its readers, as module_chain builds it); each pass keeps that order and rebuilds
// the edges from the keys, so passes compose in any order.
#pragma once

#include "streamrl/workflow/pgraph.h"

namespace streamrl::workflow {

// Dependency pruning: an edge parent -> child exists iff the child reads a key whose latest writer
// before it is the parent; a parent already reached through another parent is dropped. Tool calls
// that read different keys of one decode become parallel branches.
Graph prune_dependencies(const Graph& g);

// Decoding pipelining: a decode that emits several keys becomes a chain of partial decodes, one per
// key, so a tool call reading the first key starts when that key is complete in the decode stream
// rather than when the whole turn is. Then prunes.
Graph pipeline_decoding(const Graph& g);

// Prefill split: a prefill whose prompt starts with parts that no tool call or parse produces
// (the turn's fixed text) prefills them in a partial-prefill node that does not wait for the tools;
// the rest follows in a prefill that does. Then prunes.
Graph split_prefill(const Graph& g);

// Which passes optimize() runs (for the ablation in bench workflow).
struct PassSet {
  bool prune = true;
  bool pipeline_decoding = true;
  bool split_prefill = true;
};

Graph optimize(const Graph& g, const PassSet& passes = {});

}  // namespace streamrl::workflow

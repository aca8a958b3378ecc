// The StreamRL paper's reported figures (arXiv 2504.15930 §9; values read off plots carry about
// ±3%), so that `streamrl plan` can print its predictions next to them.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace streamrl::planner {

// Fig. 8: samples/s of one (model, devices, max output) point.
struct Fig8Row {
  std::string model;
  int devices;
  int max_output;
  double verl, colocation, sync, async;
};
const std::vector<Fig8Row>& paper_fig8();
std::optional<Fig8Row> find_fig8(const std::string& model, int devices, int max_output);

// Fig. 9 (20K dataset): generation time speed-up over Random-FIFO of skew-aware scheduling with
// the ranker and with oracle lengths.
struct Fig9Row {
  std::string model;
  double ranker_speedup, oracle_speedup;
};
std::optional<Fig9Row> find_fig9(const std::string& model);

// Fig. 10 (20K dataset): the paper's allocation and its speed-up over an even split.
struct Fig10Row {
  std::string model;
  int devices;
  int gen, train;
  double speedup;
};
std::optional<Fig10Row> find_fig10(const std::string& model, int devices);

// Fig. 11 (7B, 32 GPUs, 10K -> 20K): iterations where one node was added and Delta just before.
struct Fig11Trigger {
  int iteration;
  double delta_seconds;
};
const std::vector<Fig11Trigger>& paper_fig11();

// Fig. 12: throughput per cost, 32 H20 + 16 H800 across datacenters vs 32 H800.
struct Fig12Row {
  int max_output;
  double cross, single, ratio;
};
std::optional<Fig12Row> find_fig12(int max_output);

}  // namespace streamrl::planner

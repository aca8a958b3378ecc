#include "streamrl/planner/paper_refs.h"

namespace streamrl::planner {

const std::vector<Fig8Row>& paper_fig8() {
  static const std::vector<Fig8Row> kRows = {
      {"qwen2.5-7b", 32, 5000, 8.0, 12.9, 16.0, 21.3},
      {"qwen2.5-32b", 64, 5000, 4.2, 6.0, 6.7, 7.7},
      {"qwen2.5-72b", 128, 5000, 3.05, 4.15, 5.85, 7.3},
      {"qwen2.5-7b", 32, 10000, 4.75, 8.0, 8.8, 10.65},
      {"qwen2.5-32b", 64, 10000, 2.9, 2.9, 3.25, 3.75},
      {"qwen2.5-72b", 128, 10000, 1.75, 2.4, 3.0, 3.7},
      {"qwen2.5-7b", 32, 20000, 2.4, 4.8, 5.05, 5.7},
      {"qwen2.5-32b", 64, 20000, 1.75, 1.85, 2.15, 2.45},
      {"qwen2.5-72b", 128, 20000, 1.12, 1.5, 1.85, 2.25},
  };
  return kRows;
}

std::optional<Fig8Row> find_fig8(const std::string& model, int devices, int max_output) {
  for (const auto& r : paper_fig8()) {
    if (r.model == model && r.devices == devices && r.max_output == max_output) return r;
  }
  return std::nullopt;
}

std::optional<Fig9Row> find_fig9(const std::string& model) {
  static const std::vector<Fig9Row> kRows = {
      {"qwen2.5-7b", 1.11, 1.23}, {"qwen2.5-32b", 1.22, 1.49}, {"qwen2.5-72b", 1.27, 1.45}};
  for (const auto& r : kRows) {
    if (r.model == model) return r;
  }
  return std::nullopt;
}

std::optional<Fig10Row> find_fig10(const std::string& model, int devices) {
  static const std::vector<Fig10Row> kRows = {
      {"qwen2.5-32b", 64, 40, 24, 1.25},
      {"qwen2.5-72b", 128, 80, 48, 1.2},
  };
  for (const auto& r : kRows) {
    if (r.model == model && r.devices == devices) return r;
  }
  return std::nullopt;
}

const std::vector<Fig11Trigger>& paper_fig11() {
  static const std::vector<Fig11Trigger> kTriggers = {{10, 29.5}, {16, 21.0}, {22, 15.5}};
  return kTriggers;
}

std::optional<Fig12Row> find_fig12(int max_output) {
  static const std::vector<Fig12Row> kRows = {
      {5000, 23.0, 18.1, 1.27}, {10000, 11.9, 9.05, 1.31}, {20000, 5.95, 4.85, 1.23}};
  for (const auto& r : kRows) {
    if (r.max_output == max_output) return r;
  }
  return std::nullopt;
}

}  // namespace streamrl::planner

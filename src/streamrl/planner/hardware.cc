#include "streamrl/planner/hardware.h"

#include <algorithm>
#include <cctype>

#include "streamrl/core/errors.h"

namespace streamrl::planner {

const std::vector<Accelerator>& accelerator_catalogue() {
  // network_gb_s: 8x200 Gbps RoCE per 8-GPU node (the paper's H800 cluster) = 25 GB/s per device;
  // the H20 cloud nodes have 100 Gbps TCP per node (§8).
  static const std::vector<Accelerator> kCatalogue = {
      {"H800", 989.5, 80, 3.35, 400, 25.0, 2.85},
      {"H20", 148, 96, 4.0, 900, 1.56, 1.00},
      {"H100", 989.5, 80, 3.35, 900, 50.0, 2.85},
      {"A100", 312, 80, 2.039, 600, 25.0, 1.6},
  };
  return kCatalogue;
}

const Accelerator& find_accelerator(const std::string& name) {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  std::string known;
  for (const auto& a : accelerator_catalogue()) {
    if (lower(a.name) == lower(name)) return a;
    known += (known.empty() ? "" : ", ") + a.name;
  }
  throw InputError("unknown accelerator '" + name + "' (known: " + known + ")");
}

}  // namespace streamrl::planner

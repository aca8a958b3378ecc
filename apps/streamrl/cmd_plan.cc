// `streamrl plan --config FILE [key=value ...] [--json]`: stage balancing, per-mode throughput,
// elastic schedule and heterogeneous cost-effectiveness predicted by the planner and step
// emulator, next to the StreamRL paper's figures (configs/plan/).
#include <iostream>

#include "commands.h"
#include "streamrl/core/config.h"
#include "streamrl/planner/plan.h"

namespace streamrl::cli {

void add_plan(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("plan", "Plan resources and predict RL throughput per mode");
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  app->add_option("--config", a->config, "YAML plan (configs/plan/*.yaml)")->required();
  app->add_option("overrides", a->overrides, "key.sub=value overrides");
  app->add_flag("--json", a->json, "Print one JSON object");
  out.push_back({app, [a] {
                   core::Config cfg = core::Config::from_file(a->config, a->overrides);
                   planner::PlanConfig pc = planner::PlanConfig::from_config(cfg);
                   cfg.check_all_used();
                   nlohmann::json plan = planner::run_plan(pc);
                   if (a->json) {
                     std::cout << plan.dump() << std::endl;
                   } else {
                     std::cout << planner::format_plan(plan);
                   }
                   return 0;
                 }});
}

}  // namespace streamrl::cli

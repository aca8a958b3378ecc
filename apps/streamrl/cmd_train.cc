// `streamrl train --config FILE [key=value ...]`: RL training (GRPO) from a warm-started policy.
#include <iostream>

#include "commands.h"
#include "streamrl/rl/rl_run.h"

namespace streamrl::cli {

void add_train(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("train", "RL training (GRPO) from a warm-started checkpoint");
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  app->add_option("--config", a->config, "YAML config (configs/rl_*.yaml)")->required();
  app->add_option("overrides", a->overrides, "key.sub=value overrides");
  app->add_flag("--json", a->json, "Make the last line printed one JSON object");
  out.push_back({app, [a] {
                   core::Config cfg = core::Config::from_file(a->config, a->overrides);
                   rl::RlRunConfig rc = rl::RlRunConfig::from_config(cfg);
                   nlohmann::json r = rl::run_rl(rc, cfg.resolved_yaml());
                   std::cout << (a->json ? r.dump() : r.dump(2)) << std::endl;
                   return 0;
                 }});
}

}  // namespace streamrl::cli

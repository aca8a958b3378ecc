// `streamrl sft --config FILE [key=value ...]`: supervised warm start on task demonstrations.
#include <iostream>

#include "commands.h"
#include "streamrl/rl/sft.h"

namespace streamrl::cli {

void add_sft(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("sft", "Supervised fine-tuning on demonstrations (resumable)");
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  app->add_option("--config", a->config, "YAML config (configs/sft_*.yaml)")->required();
  app->add_option("overrides", a->overrides, "key.sub=value overrides");
  app->add_flag("--json", a->json, "Make the last line printed one JSON object");
  out.push_back({app, [a] {
                   core::Config cfg = core::Config::from_file(a->config, a->overrides);
                   rl::SftConfig sft = rl::SftConfig::from_config(cfg);
                   nlohmann::json r = rl::run_sft(sft, cfg.resolved_yaml());
                   if (a->json) {
                     std::cout << r.dump() << std::endl;
                   } else {
                     std::cout << r.dump(2)
                               << "\ncheckpoint: " << r["checkpoint"].get<std::string>()
                               << std::endl;
                   }
                   return 0;
                 }});
}

}  // namespace streamrl::cli

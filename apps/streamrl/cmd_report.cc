// `streamrl report --run DIR`: (re)writes DIR/report.html from the run's metrics.jsonl and
// trace.json, e.g. for a run that was stopped before it wrote its own.
#include <iostream>

#include "commands.h"
#include "streamrl/telemetry/report.h"

namespace streamrl::cli {

void add_report(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("report", "Write report.html of an RL run directory");
  auto run = std::make_shared<std::string>();
  app->add_option("--run", *run, "Run directory (runs/<name>)")->required();
  out.push_back({app, [run] {
                   std::cout << telemetry::write_report(*run).string() << std::endl;
                   return 0;
                 }});
}

}  // namespace streamrl::cli

// `streamrl launch --nproc N -- <streamrl args>`: a local multi-process run (trainer data
// parallelism) with torchrun's environment variables; see dist/launcher.h.
#include <memory>

#include "commands.h"
#include "streamrl/dist/launcher.h"

namespace streamrl::cli {

void add_launch(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand(
      "launch",
      "Start N local processes with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set (torchrun style)");
  auto o = std::make_shared<dist::LaunchOptions>();
  app->add_option("--nproc", o->nproc, "Processes to start")
      ->required()
      ->check(CLI::Range(1, 1024));
  app->add_option("--master-port", o->master_port, "Rendezvous port (default: a free one)")
      ->check(CLI::Range(0, 65535));
  app->add_option("--timeout", o->timeout_s, "Seconds the whole run may take (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--grace", o->grace_s, "Seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--program", o->program, "Executable to start (default: this streamrl binary)");
  app->add_option("args", o->args, "Arguments of each process, after --")->required();
  out.push_back({app, [o] { return dist::launch_local(*o); }});
}

}  // namespace streamrl::cli

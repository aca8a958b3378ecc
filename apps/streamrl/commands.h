// Subcommands of the single `streamrl` binary. Each file `cmd_NAME.cc` registers
// one subcommand; main.cc runs whichever the user picked and maps exceptions to exit codes.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace streamrl::cli {

// What a subcommand contributes: its CLI11 node and the action run after a successful parse.
// The action returns the process exit code (0 ok) or throws a streamrl error.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

using CommandList = std::vector<Command>;

// `--device` and `--dtype` of the commands that run a model without a run config (generate, eval,
// serve, bench model_speed); the training commands take run.device and model.dtype instead.
struct DeviceFlags {
  std::string device = "cpu";
  std::string dtype = "auto";
};
void add_device_flags(CLI::App* app, DeviceFlags* flags);

void add_doctor(CLI::App& root, CommandList& out);
void add_init(CLI::App& root, CommandList& out);
void add_tasks(CLI::App& root, CommandList& out);
void add_sft(CLI::App& root, CommandList& out);
void add_eval(CLI::App& root, CommandList& out);
void add_train(CLI::App& root, CommandList& out);
void add_generate(CLI::App& root, CommandList& out);
void add_profile(CLI::App& root, CommandList& out);
void add_serve(CLI::App& root, CommandList& out);
void add_bench(CLI::App& root, CommandList& out);
void add_plan(CLI::App& root, CommandList& out);
void add_launch(CLI::App& root, CommandList& out);
void add_report(CLI::App& root, CommandList& out);
void add_config(CLI::App& root, CommandList& out);

}  // namespace streamrl::cli

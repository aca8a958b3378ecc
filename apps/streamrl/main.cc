// streamrl: one binary, one subcommand per job. Exit codes: 0 ok, 1 runtime failure, 2 bad usage
// or bad input, each failure reported as one line on stderr.
#include <csignal>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "streamrl/core/allocator.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"

int main(int argc, char** argv) {
  using namespace streamrl;
  // A write to a socket whose peer died (Gloo's writev to a killed rank, an HTTP peer gone) must
  // fail as an error this program reports in one line, not end it silently with SIGPIPE: a
  // trainer rank whose peer host died was once killed that way, with no message.
  std::signal(SIGPIPE, SIG_IGN);
  core::select_blas_kernel(argv);
  core::tune_allocator();
  CLI::App app{"streamrl: disaggregated stream-generation RL post-training for LLMs"};
  app.require_subcommand(1);
  cli::CommandList commands;
  cli::add_doctor(app, commands);
  cli::add_init(app, commands);
  cli::add_tasks(app, commands);
  cli::add_sft(app, commands);
  cli::add_eval(app, commands);
  cli::add_train(app, commands);
  cli::add_generate(app, commands);
  cli::add_profile(app, commands);
  cli::add_serve(app, commands);
  cli::add_bench(app, commands);
  cli::add_plan(app, commands);
  cli::add_launch(app, commands);
  cli::add_report(app, commands);
  cli::add_config(app, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "streamrl: %s (see --help)\n", e.what());
    return 2;
  }

  try {
    for (auto& c : commands) {
      if (c.app->parsed()) return c.run();
    }
    return 2;
  } catch (const InputError& e) {
    std::fprintf(stderr, "streamrl: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streamrl: failed: %s\n", e.what());
    return 1;
  }
}

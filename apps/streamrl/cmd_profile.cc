// `streamrl profile --ckpt DIR`: the PTL(BS) table and prefill throughput of this machine.
#include <iostream>

#include "commands.h"
#include "streamrl/core/fs.h"
#include "streamrl/core/threads.h"
#include "streamrl/engine/profile.h"
#include "streamrl/model/checkpoint.h"

namespace streamrl::cli {

void add_profile(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("profile", "Measure per-token latency PTL(BS) and prefill speed");
  struct Args {
    std::string ckpt, out;
    engine::ProfileConfig cfg;
    int threads = 1;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  app->add_option("--ckpt", a->ckpt, "Checkpoint directory")->required();
  app->add_option("--threads", a->threads, "Core budget of one generation instance (default 1)");
  app->add_option("--batch-sizes", a->cfg.batch_sizes, "Batch sizes");
  app->add_option("--contexts", a->cfg.contexts, "Context lengths");
  app->add_option("--out", a->out, "Also write the JSON table to this file");
  app->add_flag("--json", a->json, "Print one JSON object");
  out.push_back({app, [a] {
                   core::apply_core_budget(a->threads);
                   model::CausalLM lm = model::load_model(a->ckpt);
                   engine::Profile p = engine::measure_profile(lm, a->cfg);
                   nlohmann::json j = p.to_json();
                   j["checkpoint"] = a->ckpt;
                   if (!a->out.empty()) core::write_file_atomic(a->out, j.dump(2) + "\n");
                   if (a->json) {
                     std::cout << j.dump() << std::endl;
                     return 0;
                   }
                   std::printf("PTL(BS) with %d thread(s): seconds per decode step\n", p.threads);
                   std::printf("%8s %8s %12s %12s\n", "context", "batch", "step_ms", "tokens/s");
                   for (const auto& pt : p.ptl) {
                     std::printf("%8d %8d %12.3f %12.0f\n", pt.context, pt.batch_size,
                                 1e3 * pt.step_seconds, pt.tokens_per_s());
                   }
                   std::printf("prefill: %.0f tokens/s\n", p.prefill_tokens_per_s);
                   return 0;
                 }});
}

}  // namespace streamrl::cli

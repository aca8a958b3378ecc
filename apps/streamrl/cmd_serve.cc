// `streamrl serve`: one SGS instance behind HTTP until SIGINT or SIGTERM, then a
// clean shutdown (in-flight requests end with 503 and their engine work is aborted).
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/log.h"
#include "streamrl/engine/engine.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/generation_config.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/server/http_server.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::cli {
namespace {

// The host part of the URL printed at start-up: a wildcard bind is reachable from other machines
// by this machine's name, not by 0.0.0.0.
std::string advertised_host(const std::string& bind) {
  if (bind != "0.0.0.0" && bind != "::" && bind != "[::]") return bind;
  char name[256] = {0};
  return gethostname(name, sizeof(name) - 1) == 0 && name[0] ? name : bind;
}

// The checkpoint directory's own name: "step_100" for "runs/x/checkpoints/step_100/".
std::string dir_name(const std::string& dir) {
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

void add_serve(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand(
      "serve", "Serve a checkpoint over HTTP: OpenAI completions, streaming generate, weights");
  struct Args {
    std::string ckpt;
    std::string admission = "fifo";
    engine::EngineConfig engine;
    server::ServerConfig server;
    DeviceFlags device;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  a->server.port = 8000;
  app->add_option("--ckpt", a->ckpt, "Checkpoint directory")->required();
  add_device_flags(app, &a->device);
  app->add_option("--host", a->server.host, "Address to listen on")->capture_default_str();
  app->add_option("--port", a->server.port, "Port (0 = any free port, printed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app->add_option("--max-batch-size", a->engine.max_batch_size, "Running samples at once")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--max-seq-len", a->engine.max_seq_len, "Prompt + output tokens per sample")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 30));
  app->add_option("--threads", a->server.threads, "Engine core budget (default: all cores)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--admission", a->admission, "Admission order: fifo or lpt")
      ->capture_default_str();
  app->add_option("--request-timeout", a->server.request_timeout_s,
                  "Seconds a generation request may take before it is aborted (504)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--model-name", a->server.model_name,
                  "\"model\" in responses (default: the checkpoint directory's name)");
  app->add_flag("--json", a->json, "Print the listening address as one JSON object");
  out.push_back(
      {app, [a, app] {
         // Block the stop signals before any thread starts, so every thread inherits
         // the mask and sigwait() below is their only receiver.
         sigset_t stop_signals;
         sigemptyset(&stop_signals);
         sigaddset(&stop_signals, SIGINT);
         sigaddset(&stop_signals, SIGTERM);
         pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

         a->engine.admission = engine::parse_admission_policy(a->admission);
         if (app->count("--model-name") == 0) a->server.model_name = dir_name(a->ckpt);
         model::CausalLM lm = model::load_model(a->ckpt);
         model::place_for_inference(lm, a->device.device, a->device.dtype);
         auto tok = tokenizer::load_tokenizer(a->ckpt);
         // Requests that leave sampling fields out get the checkpoint's generation_config.json.
         const model::GenerationDefaults gen = model::load_generation_config(a->ckpt);
         server::RequestDefaults& d = a->server.defaults;
         d.temperature = model::default_temperature(gen, d.temperature);
         d.top_p = gen.top_p.value_or(d.top_p);
         d.top_k = gen.top_k.value_or(d.top_k);
         // With a chat template, /v1/chat/completions renders messages with it and its
         // end-of-turn token stops generation too.
         std::shared_ptr<const rl::PromptEncoder> chat;
         try {
           chat = std::make_shared<const rl::PromptEncoder>(
               rl::PromptEncoder::for_chat(*tok, a->ckpt));
         } catch (const InputError& e) {
           SLOG(kInfo) << "serve: no chat completions (" << e.what() << ")";
         }
         d.stop_token_ids =
             chat ? chat->stop_ids() : rl::PromptEncoder::for_checkpoint(*tok, a->ckpt).stop_ids();
         if (chat) {
           a->server.chat_encoder = [chat](const std::vector<tokenizer::ChatMessage>& messages) {
             return chat->chat_prompt_ids(messages);
           };
         }
         engine::Engine engine(std::move(lm), a->engine);
         server::Server srv(engine, *tok, a->server);
         const std::string url =
             "http://" + advertised_host(a->server.host) + ":" + std::to_string(srv.port());
         if (a->json) {
           std::cout << nlohmann::json{{"ckpt", a->ckpt}, {"url", url}, {"port", srv.port()}}.dump()
                     << std::endl;
         } else {
           std::cout << "serving " << a->ckpt << " on " << url << std::endl;
         }
         int sig = 0;
         sigwait(&stop_signals, &sig);
         SLOG(kInfo) << "serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", shutting down";
         srv.stop();
         return 0;
       }});
}

}  // namespace streamrl::cli

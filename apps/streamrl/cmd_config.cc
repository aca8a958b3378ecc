// `streamrl config --defaults [--json]`: every configuration key of the YAML-driven commands
// (sft, train, plan) with its default, taken from the code: each command's config reader runs on
// an empty config (plus its required keys) and the keys it read are printed. docs/configuration.md
// is checked against this output, so the reference cannot drift from the code.
#include <charconv>
#include <iostream>

#include "commands.h"
#include "streamrl/core/config.h"
#include "streamrl/planner/plan.h"
#include "streamrl/rl/rl_run.h"
#include "streamrl/rl/sft.h"

namespace streamrl::cli {
namespace {

constexpr const char* kRequired = "(required)";

struct CommandDefaults {
  const char* command;
  std::string yaml;                   // the resolved config the reader produced
  std::vector<std::string> required;  // dotted keys without a default
};

// A scalar as written in a config: floats in their shortest round-trip form (yaml-cpp prints
// 0.05 as 0.050000000000000003).
std::string scalar_text(const YAML::Node& node) {
  const std::string text = node.Scalar();
  if (text.find_first_of(".eE") != std::string::npos) {
    double d = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
    if (ec == std::errc() && end == text.data() + text.size()) {
      char buf[32];
      auto [out, ec2] = std::to_chars(buf, buf + sizeof buf, d);
      return std::string(buf, out);
    }
  }
  YAML::Emitter e;
  e << node;
  return e.c_str();
}

// Flow YAML of a leaf: a scalar, or a list of them ("[1, 2]").
std::string leaf_text(const YAML::Node& node) {
  if (!node.IsSequence()) return scalar_text(node);
  std::string out = "[";
  for (size_t i = 0; i < node.size(); ++i) out += (i ? ", " : "") + leaf_text(node[i]);
  return out + "]";
}

// Flattens a YAML map into dotted keys; lists and scalars are leaves.
void flatten(const YAML::Node& node, const std::string& prefix, nlohmann::ordered_json& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  out[prefix] = leaf_text(node);
}

std::vector<CommandDefaults> all_defaults() {
  std::vector<CommandDefaults> out;
  {
    core::Config cfg = core::Config::from_string("");
    rl::SftConfig::from_config(cfg);
    out.push_back({"sft", cfg.resolved_yaml(), {}});
  }
  {
    core::Config cfg = core::Config::from_string("policy: {init_from: x}");
    rl::RlRunConfig::from_config(cfg);
    out.push_back({"train", cfg.resolved_yaml(), {"policy.init_from"}});
  }
  {
    // `lina` and `context_parallel` are optional sections: an empty one lists its keys.
    core::Config cfg =
        core::Config::from_string("model: qwen2.5-7b\nlina: {}\ncontext_parallel: {}");
    planner::PlanConfig::from_config(cfg);
    cfg.check_all_used();
    out.push_back({"plan", cfg.resolved_yaml(), {"model"}});
  }
  return out;
}

}  // namespace

void add_config(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand(
      "config", "Configuration keys of sft, train and plan with their defaults (from the code)");
  struct Args {
    bool defaults = false;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  app->add_flag("--defaults", a->defaults, "Print every key with its default")->required();
  app->add_flag("--json", a->json,
                "One JSON object: {command: {dotted.key: default as YAML text}}");
  out.push_back({app, [a] {
                   nlohmann::ordered_json all = nlohmann::ordered_json::object();
                   for (const CommandDefaults& d : all_defaults()) {
                     nlohmann::ordered_json keys = nlohmann::ordered_json::object();
                     flatten(YAML::Load(d.yaml), "", keys);
                     for (const std::string& k : d.required) keys[k] = kRequired;
                     if (a->json) {
                       all[d.command] = keys;
                       continue;
                     }
                     std::cout << "# streamrl " << d.command << "\n";
                     for (const auto& [k, v] : keys.items()) {
                       std::cout << k << ": " << v.get<std::string>() << "\n";
                     }
                     std::cout << "\n";
                   }
                   if (a->json) std::cout << all.dump() << std::endl;
                   return 0;
                 }});
}

}  // namespace streamrl::cli

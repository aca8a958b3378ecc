// `streamrl tasks`: the built-in tasks and the length profile of their demonstrations, i.e. the
// output-length skew that StreamRL's ranker and skewness-aware dispatch are built for.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "streamrl/core/errors.h"
#include "streamrl/tasks/length_stats.h"
#include "streamrl/tasks/split.h"
#include "streamrl/tasks/task.h"

namespace streamrl::cli {
namespace {

struct TasksOptions {
  std::string task;  // empty: every built-in task
  int n = 10'000;
  uint64_t seed = 0;
  int show = 0;
  bool json = false;
};

nlohmann::json example_json(const tasks::Problem& p) {
  return {
      {"prompt", p.prompt},         {"demonstration", p.demonstration}, {"reference", p.reference},
      {"difficulty", p.difficulty}, {"visible_size", p.visible_size},   {"seed", p.seed}};
}

// Length statistics of n train-split problems of `task`, plus `show` examples.
nlohmann::json task_report(const tasks::Task& task, const TasksOptions& o) {
  std::vector<double> demo, total, size;
  std::vector<int> difficulty_counts(tasks::kMaxDifficulty + 1, 0);
  nlohmann::json examples = nlohmann::json::array();
  for (int i = 0; i < o.n; ++i) {
    const tasks::Problem p = tasks::draw_problem(task, o.seed, tasks::Split::kTrain, i);
    demo.push_back(p.demonstration.size());
    total.push_back(p.prompt.size() + p.demonstration.size());
    size.push_back(p.visible_size);
    if (p.difficulty >= 0 && p.difficulty <= tasks::kMaxDifficulty)
      ++difficulty_counts[p.difficulty];
    if (i < o.show) examples.push_back(example_json(p));
  }
  const tasks::LengthSummary d = tasks::summarize(demo);
  const tasks::LengthSummary t = tasks::summarize(total);
  return {{"name", task.name()},
          {"description", task.description()},
          {"default", task.name() == tasks::default_task_name()},
          {"n", o.n},
          {"seed", o.seed},
          {"mean", d.mean},
          {"p50", d.p50},
          {"p90", d.p90},
          {"p99", d.p99},
          {"max", d.max},
          {"p90_over_p50", d.p90 / d.p50},
          {"p99_over_p50", d.p99 / d.p50},
          {"spearman_size_length", tasks::spearman(size, demo)},
          {"total_p50", t.p50},
          {"total_p99", t.p99},
          {"total_max", t.max},
          {"difficulty_counts", difficulty_counts},
          {"examples", examples}};
}

void print_text(const nlohmann::json& reports, const TasksOptions& o) {
  std::printf("%-8s %-7s %s\n", "task", "default", "description");
  for (const auto& r : reports) {
    std::printf("%-8s %-7s %s\n", r["name"].get<std::string>().c_str(),
                r["default"].get<bool>() ? "*" : "", r["description"].get<std::string>().c_str());
  }
  std::printf("\ndemonstration length in characters over %d train problems (seed %llu)\n", o.n,
              static_cast<unsigned long long>(o.seed));
  std::printf("%-8s %6s %6s %6s %6s %8s %8s %9s  %-15s %s\n", "task", "p50", "p90", "p99", "max",
              "p90/p50", "p99/p50", "spearman", "with prompt", "by difficulty 0..4");
  for (const auto& r : reports) {
    std::string with_prompt;
    for (const char* key : {"total_p50", "total_p99", "total_max"}) {
      if (!with_prompt.empty()) with_prompt += '/';
      with_prompt += std::to_string(std::lround(r[key].get<double>()));
    }
    std::string by_difficulty;
    for (int c : r["difficulty_counts"]) {
      if (!by_difficulty.empty()) by_difficulty += ' ';
      by_difficulty += std::to_string(c);
    }
    std::printf("%-8s %6.1f %6.1f %6.1f %6.0f %8.2f %8.2f %9.2f  %-15s %s\n",
                r["name"].get<std::string>().c_str(), r["p50"].get<double>(),
                r["p90"].get<double>(), r["p99"].get<double>(), r["max"].get<double>(),
                r["p90_over_p50"].get<double>(), r["p99_over_p50"].get<double>(),
                r["spearman_size_length"].get<double>(), with_prompt.c_str(),
                by_difficulty.c_str());
  }
  std::printf(
      "(spearman: rank correlation of the prompt-visible size with the length; with prompt: "
      "p50/p99/max of prompt plus demonstration)\n");
  for (const auto& r : reports) {
    for (const auto& e : r["examples"]) {
      std::printf(
          "\n%s  difficulty %d, visible size %d, seed %llu\n  prompt         %s\n"
          "  demonstration  %s\n  answer         %s\n",
          r["name"].get<std::string>().c_str(), e["difficulty"].get<int>(),
          e["visible_size"].get<int>(), static_cast<unsigned long long>(e["seed"].get<uint64_t>()),
          e["prompt"].get<std::string>().c_str(), e["demonstration"].get<std::string>().c_str(),
          e["reference"].get<std::string>().c_str());
    }
  }
}

}  // namespace

void add_tasks(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand(
      "tasks", "List the built-in tasks and the length statistics of their demonstrations");
  auto o = std::make_shared<TasksOptions>();
  app->add_option("--task", o->task, "Only this task (default: all)");
  app->add_option("--n", o->n, "Problems generated per task for the statistics")
      ->capture_default_str();
  app->add_option("--seed", o->seed, "Base seed of the train-split draws")->capture_default_str();
  app->add_option("--show", o->show, "Print this many example problems per task");
  app->add_flag("--json", o->json, "Print one JSON object");
  out.push_back({app, [o] {
                   if (o->n < 1) throw UsageError("--n must be at least 1");
                   if (o->show < 0) throw UsageError("--show must not be negative");
                   std::vector<std::string> names = tasks::task_names();
                   if (!o->task.empty()) names = {tasks::get_task(o->task).name()};
                   nlohmann::json reports = nlohmann::json::array();
                   for (const std::string& name : names) {
                     reports.push_back(task_report(tasks::get_task(name), *o));
                   }
                   if (o->json) {
                     std::cout << nlohmann::json{{"tasks", reports}}.dump() << std::endl;
                   } else {
                     print_text(reports, *o);
                   }
                   return 0;
                 }});
}

}  // namespace streamrl::cli

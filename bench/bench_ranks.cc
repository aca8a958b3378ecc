#include "bench_ranks.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "streamrl/core/errors.h"
#include "streamrl/dist/launcher.h"

namespace streamrl::bench {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string last_lines(const fs::path& file, size_t n) {
  std::ifstream f(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) {
    out += lines[i] + "\n";
  }
  return out;
}

}  // namespace

json launch_bench_ranks(const std::string& bench, int nproc, const char* worker_env,
                        const BenchOptions& options) {
  const fs::path root = fs::temp_directory_path() /
                        ("streamrl_bench_" + bench + "_ranks_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path out = root / "rank0.json";
  dist::LaunchOptions lo;
  lo.nproc = nproc;
  lo.args = {"bench", bench, "--json"};
  if (options.quick) lo.args.push_back("--quick");
  lo.env = {std::string(worker_env) + "=" + out.string()};
  lo.log_file = (root / "ranks.log").string();
  lo.timeout_s = 1200;
  const int rc = dist::launch_local(lo);
  std::ifstream f(out);
  const json j = json::parse(f, nullptr, false);
  if (rc != 0 || !j.is_object()) {
    // The ranks' last words go into the error too: CI keeps only what the command printed.
    throw RuntimeFailure("bench " + bench + ": the ranks failed (exit " + std::to_string(rc) +
                         "); their output is in " + lo.log_file + "; it ends:\n" +
                         last_lines(lo.log_file, 20));
  }
  fs::remove_all(root);
  return j;
}

json finish_bench_rank(dist::ProcessGroup& world, const json& result, const std::string& out_path,
                       const std::string& bench) {
  if (world.rank() == 0) {
    std::ofstream f(out_path);
    f << result.dump() << "\n";
    if (!f) throw RuntimeFailure("bench " + bench + ": cannot write " + out_path);
  }
  world.barrier();
  return {{"rank", world.rank()}};
}

}  // namespace streamrl::bench

// `streamrl doctor`: what this machine gives streamrl (libtorch, BLAS, threads) and its roofline.
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "streamrl/core/allocator.h"
#include "streamrl/core/roofline.h"
#include "streamrl/core/threads.h"

namespace streamrl::cli {
namespace {

nlohmann::json doctor_report(int threads) {
  core::apply_core_budget(threads);
  core::Roofline roof = core::measure_roofline();
  std::string blas = core::active_blas_library();
  return {
      {"torch_version", TORCH_VERSION},
      {"blas", blas.empty() ? "unknown" : blas},
      {"blas_is_openblas", !core::openblas_config().empty()},
      {"openblas_config", core::openblas_config()},
      {"blas_kernel", core::openblas_core_name()},
      {"cores", core::available_cores()},
      {"aten_threads", core::aten_threads()},
      {"blas_threads", core::blas_threads()},
      {"gemm_gflops", roof.gemm_gflops},
      {"memory_gb_per_s", roof.memory_gb_per_s},
      {"malloc", core::allocator_setting()},
  };
}

}  // namespace

void add_doctor(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("doctor", "Report libtorch, BLAS, threads and the GEMM roofline");
  auto json = std::make_shared<bool>(false);
  auto threads = std::make_shared<int>(core::available_cores());
  app->add_flag("--json", *json, "Print one JSON object");
  app->add_option("--threads", *threads, "Threads for the measurement (default: all cores)");
  out.push_back(
      {app, [json, threads] {
         nlohmann::json r = doctor_report(*threads);
         if (*json) {
           std::cout << r.dump() << std::endl;
           return 0;
         }
         std::cout << "libtorch       " << r["torch_version"].get<std::string>() << "\n"
                   << "BLAS           " << r["blas"].get<std::string>()
                   << (r["blas_is_openblas"].get<bool>() ? " (OpenBLAS)" : " (NOT OpenBLAS: slow)")
                   << "\n"
                   << "cores          " << r["cores"] << "\n"
                   << "threads        aten " << r["aten_threads"] << ", blas " << r["blas_threads"]
                   << "\n"
                   << "fp32 GEMM      " << r["gemm_gflops"].get<double>() << " GFLOP/s\n"
                   << "memory         " << r["memory_gb_per_s"].get<double>() << " GB/s\n"
                   << "malloc         " << r["malloc"].get<std::string>() << "\n";
         if (!r["blas_is_openblas"].get<bool>()) {
           std::cout << "hint: run scripts/setup to make OpenBLAS the active libblas.so.3\n";
         }
         return 0;
       }});
}

}  // namespace streamrl::cli

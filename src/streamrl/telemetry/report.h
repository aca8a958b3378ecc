// report.html: one self-contained page (inline SVG, no scripts or downloads) summarising an RL run
// from its metrics.jsonl and trace.json: reward/accuracy and length curves, samples/s, the
// held-out accuracy before and after, and the stage timeline of the last iterations.
#pragma once

#include <filesystem>
#include <string>

namespace streamrl::telemetry {

// The page for the run directory `run_dir` (reads run_dir/metrics.jsonl and, when present,
// run_dir/trace.json). Throws InputError when metrics.jsonl is missing.
std::string render_report(const std::filesystem::path& run_dir);

// Writes render_report(run_dir) to run_dir/report.html atomically; returns its path.
std::filesystem::path write_report(const std::filesystem::path& run_dir);

}  // namespace streamrl::telemetry

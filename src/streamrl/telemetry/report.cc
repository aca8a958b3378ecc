#include "streamrl/telemetry/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/telemetry/metrics_log.h"
#include "streamrl/telemetry/trace.h"

namespace streamrl::telemetry {
namespace fs = std::filesystem;
namespace {

using json = nlohmann::json;

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (x, y)
};

std::string fmt(double v, int digits = 3) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

// Width of `text` at the report's 11px label font: a generous per-character estimate, so labels
// never overlap or leave the SVG (the font's widest digits and letters are about 6.2px).
double label_width(const std::string& text) { return 6.6 * text.size(); }

// A line chart with axes (min, middle and max labels), an x-axis label and a legend above the plot
// area. The left margin fits the widest y label ("3.24e+03"); legend entries wrap onto more rows
// when they do not fit one.
std::string line_chart(const std::string& title, const std::vector<Series>& series,
                       const std::string& x_label) {
  const double W = 460, R = 12, B = 34, kRow = 15;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& s : series) {
    for (auto [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  const bool empty = x0 > x1;
  if (!empty) {
    if (x1 == x0) x1 = x0 + 1;
    if (y1 == y0) y1 = y0 + 1;
    y0 = std::min(y0, 0.0);
  }
  const std::vector<std::string> y_labels =
      empty ? std::vector<std::string>{}
            : std::vector<std::string>{fmt(y0), fmt((y0 + y1) / 2), fmt(y1)};
  double widest = 0;
  for (const auto& l : y_labels) widest = std::max(widest, label_width(l));
  const double L = std::max(36.0, widest + 10);
  // Legend rows: swatch (14px), gap, name, then 14px before the next entry.
  std::vector<std::vector<std::pair<double, const Series*>>> rows(1);
  double lx = L;
  for (const auto& s : series) {
    const double w = 18 + label_width(s.name);
    if (lx + w > W - R && !rows.back().empty()) rows.emplace_back(), lx = L;
    rows.back().push_back({lx, &s});
    lx += w + 14;
  }
  const double T = 24 + kRow * rows.size() + 6;
  const double H = T + 158 + B;
  std::ostringstream o;
  o << "<svg width='" << W << "' height='" << H << "' viewBox='0 0 " << W << " " << H << "'>";
  o << "<text x='" << L << "' y='16' class='t'>" << escape(title) << "</text>";
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y = 24 + kRow * (r + 1);
    for (const auto& [x, s] : rows[r]) {
      o << "<line x1='" << x << "' y1='" << y - 4 << "' x2='" << x + 14 << "' y2='" << y - 4
        << "' stroke='" << s->color << "' stroke-width='2.5'/><text x='" << x + 18 << "' y='" << y
        << "' class='a'>" << escape(s->name) << "</text>";
    }
  }
  if (empty) return o.str() + "<text x='60' y='" + fmt(T + 40) + "'>no data</text></svg>";
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  o << "<rect x='" << L << "' y='" << T << "' width='" << W - L - R << "' height='" << H - T - B
    << "' class='frame'/>";
  const double y_at[3] = {y0, (y0 + y1) / 2, y1};
  for (int i = 0; i < 3; ++i) {
    o << "<text x='" << L - 5 << "' y='" << py(y_at[i]) + 4 << "' class='a' text-anchor='end'>"
      << y_labels[i] << "</text>";
    if (i == 1) {
      o << "<line x1='" << L << "' y1='" << py(y_at[i]) << "' x2='" << W - R << "' y2='"
        << py(y_at[i]) << "' class='grid'/>";
    }
  }
  o << "<text x='" << L << "' y='" << H - B + 14 << "' class='a'>" << fmt(x0) << "</text>";
  o << "<text x='" << W - R << "' y='" << H - B + 14 << "' class='a' text-anchor='end'>" << fmt(x1)
    << "</text>";
  o << "<text x='" << (L + W - R) / 2 << "' y='" << H - 6 << "' class='a' text-anchor='middle'>"
    << escape(x_label) << "</text>";
  for (const auto& s : series) {
    o << "<polyline fill='none' stroke='" << s.color << "' stroke-width='1.6' points='";
    for (auto [x, y] : s.points) {
      if (std::isfinite(y)) o << px(x) << "," << py(y) << " ";
    }
    o << "'/>";
    if (s.points.size() <= 30) {
      for (auto [x, y] : s.points) {
        if (std::isfinite(y)) {
          o << "<circle cx='" << px(x) << "' cy='" << py(y) << "' r='2.2' fill='" << s.color
            << "'/>";
        }
      }
    }
  }
  o << "</svg>";
  return o.str();
}

// Spans of the last `window_s` seconds of the trace, one row per track.
std::string timeline(const std::vector<json>& spans, const std::map<int, std::string>& names,
                     double window_s) {
  if (spans.empty()) return "<p>No trace.json in this run.</p>";
  // The window ends with the last training work: the final held-out evaluation would otherwise
  // fill it.
  double end = 0;
  for (const auto& e : spans) {
    if (e.value("name", "") == "held-out eval") continue;
    end = std::max(end, e.value("ts", 0.0) + e.value("dur", 0.0));
  }
  const double begin = std::max(0.0, end - window_s * 1e6);
  std::map<int, int> row;
  for (const auto& e : spans) row.emplace(e.value("tid", 0), 0);
  int r = 0;
  for (auto& [tid, idx] : row) idx = r++;
  static const std::map<std::string, std::string> colors = {
      {"decode", "#4e79a7"},       {"prefill+decode", "#2c5f8a"}, {"sample work", "#59a14f"},
      {"micro-batch", "#e15759"},  {"optimizer step", "#b07aa1"}, {"weight transfer", "#f28e2b"},
      {"held-out eval", "#bab0ac"}};
  // Header: the window's length, then the colour legend, wrapped to the width; lanes below.
  const double W = 940, L = 150, lane = 26;
  std::vector<std::pair<double, double>> legend_at;  // (x, baseline y) per colour
  double lx = 4, ly = 32;
  for (const auto& [name, color] : colors) {
    const double w = 13 + label_width(name);
    if (lx + w > W) lx = 4, ly += 16;
    legend_at.push_back({lx, ly});
    lx += w + 14;
  }
  const double top = ly + 12, H = top + lane * row.size() + 6;
  auto px = [&](double ts) { return L + (ts - begin) / std::max(1.0, end - begin) * (W - L - 10); };
  std::ostringstream o;
  o << "<svg width='" << W << "' height='" << H << "'>";
  for (const auto& [tid, idx] : row) {
    auto it = names.find(tid);
    o << "<text x='4' y='" << top + idx * lane + 12 << "' class='a'>"
      << escape(it != names.end() ? it->second : "track " + std::to_string(tid)) << "</text>";
  }
  for (const auto& e : spans) {
    const double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
    if (ts + dur < begin || ts > end) continue;
    const std::string name = e.value("name", "");
    auto c = colors.find(name);
    const double x = px(std::max(ts, begin));
    o << "<rect x='" << x << "' y='" << top + row[e.value("tid", 0)] * lane << "' width='"
      << std::max(0.5, px(ts + dur) - x) << "' height='" << lane - 6 << "' fill='"
      << (c != colors.end() ? c->second : "#999") << "'><title>" << escape(name) << " "
      << fmt(dur / 1e3) << " ms</title></rect>";
  }
  o << "<text x='4' y='14' class='a'>last " << fmt(window_s) << " s of the run</text>";
  size_t i = 0;
  for (const auto& [name, color] : colors) {
    const auto [x, y] = legend_at[i++];
    o << "<rect x='" << x << "' y='" << y - 9 << "' width='10' height='10' fill='" << color
      << "'/>";
    o << "<text x='" << x + 13 << "' y='" << y << "' class='a'>" << name << "</text>";
  }
  o << "</svg>";
  return o.str();
}

double num(const json& j, const char* a, const char* b = nullptr) {
  const json* v = &j;
  if (!v->contains(a)) return NAN;
  v = &(*v)[a];
  if (b) {
    if (!v->contains(b)) return NAN;
    v = &(*v)[b];
  }
  return v->is_number() ? v->get<double>() : NAN;
}

// Greedy accuracy, sampled pass@1 and pass@k by difficulty, before and at the last evaluation,
// each with the number of distinct held-out prompts behind it.
std::string pass_at_k_table(const json& before, const json& after) {
  if (!after.contains("pass_at_k")) return "";
  std::ostringstream o;
  o << "<h2>Held-out pass@k (before &rarr; last evaluation)</h2><table><tr><th>difficulty</th>"
    << "<th>prompts</th><th>greedy</th><th>pass@1 sampled</th>";
  for (const auto& [k, v] : after["pass_at_k"].items()) o << "<th>pass@" << k << "</th>";
  o << "</tr>";
  auto row = [&](const std::string& label, const json& b, const json& a) {
    o << "<tr><td>" << label << "</td><td>" << a.value("distinct_prompts", 0) << "</td>";
    auto cell = [&](double x, double y) {
      o << "<td>" << fmt(x) << " &rarr; " << fmt(y) << "</td>";
    };
    cell(num(b, "accuracy"), num(a, "accuracy"));
    cell(num(b, "pass_at_1_sampled"), num(a, "pass_at_1_sampled"));
    for (const auto& [k, v] : a["pass_at_k"].items()) {
      cell(b.contains("pass_at_k") ? num(b["pass_at_k"], k.c_str()) : NAN, v.get<double>());
    }
    o << "</tr>";
  };
  row("all", before, after);
  const json by_difficulty = after.value("by_difficulty", json::object());
  for (const auto& [d, a] : by_difficulty.items()) {
    const json b = before.contains("by_difficulty")
                       ? before["by_difficulty"].value(d, json::object())
                       : json::object();
    if (a.contains("pass_at_k")) row(d, b, a);
  }
  return o.str() + "</table>";
}

// MoE policies: per-layer two-expert share and expert load (max/mean), and the routing mismatch
// between trainer and engine, from the "moe" entries of the records; empty for dense runs.
std::string moe_section(const std::vector<json>& records) {
  static const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                  "#59a14f", "#edc948", "#b07aa1", "#9c755f"};
  std::vector<Series> share, load;
  Series mismatch{"trainer vs engine", "#e15759", {}}, aux{"load-balancing loss", "#4e79a7", {}};
  const json* last = nullptr;
  for (const auto& r : records) {
    if (!r.contains("moe") || !r["moe"].is_object()) continue;
    const json& m = r["moe"];
    const double step = num(r, "step");
    auto add_layers = [&](const char* key, std::vector<Series>* out) {
      if (!m.contains(key) || !m[key].is_array()) return;
      for (size_t l = 0; l < m[key].size(); ++l) {
        if (out->size() <= l) {
          out->push_back({"layer " + std::to_string(l), kColors[l % 8], {}});
        }
        (*out)[l].points.push_back({step, m[key][l].is_number() ? m[key][l].get<double>() : NAN});
      }
    };
    add_layers("two_expert_share", &share);
    add_layers("expert_load", &load);
    mismatch.points.push_back({step, num(m, "routing_mismatch")});
    aux.points.push_back({step, num(m, "aux_loss")});
    last = &r;
  }
  if (!last) return "";
  std::ostringstream o;
  const json& m = (*last)["moe"];
  o << "<h2>Mixture of experts</h2><p>routing replay <b>"
    << (m.value("routing_replay", false) ? "on" : "off") << "</b>, curriculum <b>"
    << (m.value("curriculum", false) ? "on" : "off") << "</b>";
  if (std::isfinite(num(m, "routing_mismatch"))) {
    o << "; last iteration: " << fmt(100 * num(m, "routing_mismatch"), 3)
      << "% of token-layer routings differ between trainer and engine";
  }
  o << ".</p>";
  o << line_chart("share of tokens on two experts", share, "iteration");
  o << line_chart("expert load (busiest / mean)", load, "iteration");
  o << line_chart("routing mismatch", {mismatch}, "iteration");
  o << line_chart("router loss", {aux}, "iteration");
  return o.str();
}

}  // namespace

std::string render_report(const fs::path& run_dir) {
  const fs::path metrics_path = run_dir / "metrics.jsonl";
  if (!fs::exists(metrics_path)) {
    throw InputError("no metrics.jsonl in " + run_dir.string() + " (not a run directory?)");
  }
  std::vector<json> records = MetricsLog::read(metrics_path);
  Series reward{"reward mean", "#4e79a7", {}}, acc{"train accuracy", "#59a14f", {}},
      eval{"held-out accuracy", "#e15759", {}}, len_mean{"mean", "#4e79a7", {}},
      len_p90{"p90", "#f28e2b", {}}, len_max{"max", "#bab0ac", {}}, sps{"samples/s", "#b07aa1", {}};
  std::string mode = "?";
  json first_eval, last_eval;
  std::vector<json> iterations;
  std::vector<std::string> warnings;
  for (const auto& r : records) {
    const double step = num(r, "step");
    if (r.contains("collapse_warning")) {
      warnings.push_back(r["collapse_warning"].get<std::string>());
    }
    for (const char* key : {"eval", "final_eval"}) {
      if (r.contains(key)) {
        eval.points.push_back({step, num(r[key], "accuracy")});
        if (first_eval.is_null()) first_eval = r[key];
        last_eval = r[key];
      }
    }
    if (!r.contains("reward_mean")) continue;
    mode = r.value("mode", mode);
    iterations.push_back(r);
    reward.points.push_back({step, num(r, "reward_mean")});
    acc.points.push_back({step, num(r, "accuracy")});
    len_mean.points.push_back({step, num(r, "response_length", "mean")});
    len_p90.points.push_back({step, num(r, "response_length", "p90")});
    len_max.points.push_back({step, num(r, "response_length", "max")});
    sps.points.push_back({step, num(r, "samples_per_s")});
  }

  std::ostringstream o;
  o << "<!doctype html><html><head><meta charset='utf-8'><title>streamrl report: "
    << escape(run_dir.filename().string()) << "</title><style>"
    << "body{font:14px sans-serif;margin:24px;color:#222}svg{margin:6px;background:#fff}"
    << ".t{font-weight:bold;font-size:13px}.a{font-size:11px}.frame{fill:none;stroke:#ccc}"
    << ".grid{stroke:#eee}"
    << "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;"
    << "text-align:right}</style></head><body>";
  o << "<h1>RL run " << escape(run_dir.filename().string()) << "</h1>";
  o << "<p>mode <b>" << escape(mode) << "</b>, " << iterations.size() << " iterations logged";
  if (!first_eval.is_null()) {
    o << "; held-out greedy accuracy <b>" << fmt(num(first_eval, "accuracy")) << "</b> before, <b>"
      << fmt(num(last_eval, "accuracy")) << "</b> at the last evaluation";
  }
  o << ".</p>";
  for (const auto& w : warnings) {
    o << "<p style='color:#c00'><b>warning:</b> " << escape(w) << "</p>";
  }
  o << line_chart("reward and accuracy", {reward, acc, eval}, "iteration");
  o << line_chart("response length (tokens)", {len_mean, len_p90, len_max}, "iteration");
  o << line_chart("throughput", {sps}, "iteration");
  if (!first_eval.is_null()) o << pass_at_k_table(first_eval, last_eval);
  o << moe_section(iterations);

  // Stage times of the last iterations.
  o << "<h2>Stage seconds, last iterations</h2><table><tr><th>iteration</th><th>generate</th>"
    << "<th>sample work</th><th>train</th><th>weight update</th><th>trainer wait</th>"
    << "<th>rank collectives</th><th>iteration</th><th>idle gen</th><th>idle "
       "trainer</th><th>samples/s</th></tr>";
  const size_t from = iterations.size() > 10 ? iterations.size() - 10 : 0;
  for (size_t i = from; i < iterations.size(); ++i) {
    const json& r = iterations[i];
    o << "<tr><td>" << fmt(num(r, "step"), 6) << "</td>";
    for (const char* k : {"generate", "sample_work", "train", "weight_update", "trainer_wait",
                          "collectives", "iteration"}) {
      o << "<td>" << fmt(num(r, "stage_seconds", k)) << "</td>";
    }
    o << "<td>" << fmt(num(r, "idle_fraction", "generator"), 2) << "</td><td>"
      << fmt(num(r, "idle_fraction", "trainer"), 2) << "</td><td>" << fmt(num(r, "samples_per_s"))
      << "</td></tr>";
  }
  o << "</table>";

  // Timeline of the last iterations from the trace.
  o << "<h2>Timeline</h2>";
  Trace::Contents trace;
  if (fs::exists(run_dir / "trace.json")) trace = Trace::read(run_dir / "trace.json");
  double window = 10;
  if (iterations.size() >= 3) {
    window = 0;
    for (size_t i = iterations.size() - 3; i < iterations.size(); ++i) {
      window += num(iterations[i], "stage_seconds", "iteration");
    }
  }
  o << timeline(trace.spans, trace.track_names, std::isfinite(window) && window > 0 ? window : 10);
  o << "<p class='a'>Full timeline: open trace.json in https://ui.perfetto.dev.</p>";
  o << "</body></html>\n";
  return o.str();
}

fs::path write_report(const fs::path& run_dir) {
  const fs::path out = run_dir / "report.html";
  core::write_file_atomic(out, render_report(run_dir));
  return out;
}

}  // namespace streamrl::telemetry

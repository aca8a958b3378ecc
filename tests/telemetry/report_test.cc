// Tests of report.html's chart layout: the left margin fits the widest y label and the legend
// sits in rows above the plot area, one entry after another.
#include "streamrl/telemetry/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>

namespace streamrl::telemetry {
namespace {
namespace fs = std::filesystem;

TEST(ReportLayout, WideLabelsFitAndLegendEntriesDoNotOverlap) {
  const fs::path dir =
      fs::temp_directory_path() / ("streamrl_report_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream m(dir / "metrics.jsonl");
    for (int step = 1; step <= 3; ++step) {
      m << "{\"step\": " << step << ", \"reward_mean\": " << 3240 * step
        << ", \"accuracy\": 0.5, \"samples_per_s\": 2.0}\n";
    }
  }
  const std::string html = render_report(dir);
  fs::remove_all(dir);
  // The first chart: its frame's left edge is past the widest y label, "9.72e+03".
  std::smatch frame;
  ASSERT_TRUE(std::regex_search(html, frame,
                                std::regex("<rect x='([0-9.]+)' y='([0-9.]+)'[^>]*class='frame'")));
  const double left = std::stod(frame[1]), top = std::stod(frame[2]);
  ASSERT_NE(html.find(">9.72e+03</text>"), std::string::npos);
  EXPECT_GE(left - 5 - 6.6 * std::string("9.72e+03").size(), 0.0);
  // Legend entries of the first chart: above the frame, each starting after the previous ends.
  const std::string first_chart = html.substr(0, html.find("</svg>"));
  std::regex entry(
      "<line x1='([0-9.]+)' y1='([0-9.]+)'[^>]*/><text x='[0-9.]+' y='[0-9.]+' "
      "class='a'>([^<]*)</text>");
  double previous_end = 0;
  int entries = 0;
  for (auto it = std::sregex_iterator(first_chart.begin(), first_chart.end(), entry);
       it != std::sregex_iterator(); ++it, ++entries) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    EXPECT_LT(y, top);
    EXPECT_GE(x, previous_end);
    previous_end = x + 18 + 6.6 * (*it)[3].str().size();
  }
  EXPECT_EQ(entries, 3);  // reward mean, train accuracy, held-out accuracy
}

}  // namespace
}  // namespace streamrl::telemetry

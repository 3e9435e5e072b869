// The report page without a browser: downsampling keeps the extremes, the run directory's text
// cannot end the page's script elements, and what is cut or missing is named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "meridian/core/error.h"
#include "meridian/report/report.h"

namespace fs = std::filesystem;
using meridian::report::downsample;

TEST(Downsample, ShortCurvesAreKept) {
  std::vector<double> x{1, 2, 3}, y{5, 4, 6};
  downsample(x, y, 10);
  EXPECT_EQ(x, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(y, (std::vector<double>{5, 4, 6}));
}

TEST(Downsample, KeepsEndsAndEveryExtremeWithinTheLimit) {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise;
  std::vector<double> x, y;
  for (int i = 0; i < 100000; ++i) x.push_back(i + 1), y.push_back(noise(rng));
  y[31337] = 50, y[77777] = -40;  // spikes a plain stride would miss
  const auto [lo, hi] = std::minmax_element(y.begin(), y.end());
  const double low = *lo, high = *hi;
  std::vector<double> ox = x, oy = y;
  downsample(ox, oy, 2000);
  EXPECT_LE(ox.size(), 2000u);
  EXPECT_GE(ox.size(), 1900u);
  EXPECT_EQ(ox.front(), 1);
  EXPECT_EQ(ox.back(), 100000);
  EXPECT_TRUE(std::is_sorted(ox.begin(), ox.end()));
  EXPECT_EQ(*std::max_element(oy.begin(), oy.end()), high);
  EXPECT_EQ(*std::min_element(oy.begin(), oy.end()), low);
  EXPECT_NE(std::find(ox.begin(), ox.end(), 31338.0), ox.end());
  // Every kept point is a point of the curve.
  for (size_t i = 0; i < ox.size(); ++i) EXPECT_EQ(oy[i], y[size_t(ox[i]) - 1]);
}

TEST(Downsample, KeepsANaNStep) {
  std::vector<double> x, y;
  for (int i = 0; i < 10000; ++i) x.push_back(i), y.push_back(1.0);
  y[4321] = NAN;
  downsample(x, y, 100);
  EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](double v) { return std::isnan(v); }));
}

class RunDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("meridian_report_test_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; }
  fs::path dir;
};

TEST_F(RunDir, TextFromTheRunCannotEndTheScriptElements) {
  write("metrics.csv", "step,wall_time,name,value\n1,10.0,train/</script><b>,1\n");
  write("config.yaml", "a: \"</script><script>alert(1)</script>\"\n");
  const std::string page = meridian::report::render_page(dir.string());
  EXPECT_EQ(page.find("</script><script>alert"), std::string::npos);
  EXPECT_EQ(page.find("</script><b>"), std::string::npos);
  EXPECT_NE(page.find("\\u003c/script\\u003e\\u003cscript\\u003ealert(1)"), std::string::npos);
  EXPECT_NE(page.find("default-src 'none'"), std::string::npos);
}

TEST_F(RunDir, NamesWhatIsCutOrMissingAndInfersRestarts) {
  // Steps 1..6, then a restart from step 4 (steps 5 and 6 lost), then steps 5..8 and a cut line.
  std::string csv = "step,wall_time,name,value\n";
  for (int s = 1; s <= 6; ++s) csv += std::to_string(s) + ",100,train/loss," + std::to_string(10 - s) + "\n";
  for (int s = 5; s <= 8; ++s) csv += std::to_string(s) + ",200,train/loss," + std::to_string(20 - s) + "\n";
  csv += "9,300,train/lo";
  write("metrics.csv", csv);
  meridian::report::PageStats stats;
  const std::string page = meridian::report::render_page(dir.string(), &stats);
  EXPECT_EQ(stats.metric_rows, 10);
  ASSERT_EQ(stats.problems.size(), 4u);
  EXPECT_NE(stats.problems[0].find("its last line (line 12) was cut short"), std::string::npos);
  EXPECT_NE(stats.problems[1].find("health.jsonl is missing"), std::string::npos);
  EXPECT_NE(stats.problems[2].find("attempts.jsonl is missing"), std::string::npos);
  EXPECT_NE(stats.problems[3].find("config.yaml is missing"), std::string::npos);
  // The resumed attempt's values win: step 5 is 15, not 5; the second attempt resumed at step 4, 2 lost.
  EXPECT_NE(page.find("\"x\":[1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0],\"y\":[9.0,8.0,7.0,6.0,15.0,14.0,13.0,12.0]"),
            std::string::npos);
  EXPECT_NE(page.find("\"last_step\":6"), std::string::npos);
  EXPECT_NE(page.find("\"lost\":2"), std::string::npos);
}

// A grow-back (jobs/mpirun-restart.sh --rejoin-every): an attempt with more ranks than the one before,
// on a host it did not have, is marked "rejoined"; the shrink before it is not, nor a restart on the
// same hosts.
TEST_F(RunDir, MarksTheAttemptThatGrewBackWithTheHostsThatRejoined) {
  write("metrics.csv", "step,wall_time,name,value\n1,10.0,train/loss,1\n");
  write("attempts.jsonl",
        "{\"event\":\"start\",\"time\":10,\"world_size\":3,\"hosts\":[\"n1\",\"n2\",\"n3\"]}\n"
        "{\"event\":\"start\",\"time\":20,\"world_size\":2,\"hosts\":[\"n1\",\"n2\"],"
        "\"resumed_from\":{\"step\":5}}\n"
        "{\"event\":\"end\",\"time\":29,\"step\":9,\"status\":\"signalled\"}\n"
        "{\"event\":\"start\",\"time\":30,\"world_size\":3,\"hosts\":[\"n1\",\"n2\",\"n3\"],"
        "\"resumed_from\":{\"step\":9}}\n"
        "{\"event\":\"start\",\"time\":40,\"world_size\":3,\"hosts\":[\"n1\",\"n2\",\"n3\"],"
        "\"resumed_from\":{\"step\":12}}\n");
  const std::string page = meridian::report::render_page(dir.string());
  const std::string tag = "id=\"run-data\">";
  const size_t data = page.find(tag) + tag.size();
  ASSERT_NE(data, std::string::npos + tag.size());
  const auto run = nlohmann::json::parse(page.substr(data, page.find("</script>", data) - data));
  const auto& attempts = run.at("attempts");
  ASSERT_EQ(attempts.size(), 4u);
  EXPECT_FALSE(attempts[1].contains("rejoined"));
  EXPECT_EQ(attempts[2].at("rejoined"), nlohmann::json({{"hosts", {"n3"}}, {"from", 2}, {"to", 3}}));
  EXPECT_EQ(attempts[2].at("lost"), 0);
  EXPECT_FALSE(attempts[3].contains("rejoined"));
}

TEST_F(RunDir, NotADirectoryIsAUserError) {
  EXPECT_THROW(meridian::report::render_page((dir / "none").string()), meridian::UserError);
}

TEST_F(RunDir, FieldsOfAnotherTypeAreNamedNotThrown) {
  write("metrics.csv", "step,wall_time,name,value\n1,10.0,train/loss,1\n");
  write("health.jsonl",
        "{\"step\": 2, \"time\": \"soon\", \"ranks\": [{\"rank\": 0, \"host\": 5, \"step_s\": \"a\"}], "
        "\"warnings\": [\"straggler: rank 0\", 7]}\n");
  write("attempts.jsonl", "{\"event\": \"start\", \"time\": \"soon\"}\n{\"event\": \"end\", \"step\": \"x\"}\n");
  meridian::report::PageStats stats;
  std::string page;
  ASSERT_NO_THROW(page = meridian::report::render_page(dir.string(), &stats));
  std::string problems;
  for (const auto& p : stats.problems) problems += p + "\n";
  EXPECT_NE(problems.find("could not be read"), std::string::npos) << problems;
  EXPECT_NE(page.find("\"train/loss\""), std::string::npos);  // the rest of the run is still shown
}

// PageWriter: the background thread renders while the run appends; finish() ends it and writes the
// final page, which holds every step appended before it.
TEST_F(RunDir, PageWriterRendersInTheBackgroundWhileTheRunAppends) {
  write("metrics.csv", "step,wall_time,name,value\n");
  meridian::report::PageWriter writer(dir.string());
  for (int s = 1; s <= 100; ++s) {
    std::ofstream(dir / "metrics.csv", std::ios::app) << s << ",1.0,train/loss," << s << "\n";
    writer.request();
  }
  ASSERT_EQ(writer.finish(), (dir / "report.html").string());
  std::ifstream in(dir / "report.html");
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("99.0,100.0]"), std::string::npos);
  EXPECT_NE(page.find("</html>"), std::string::npos);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"metrics.csv", "report.html"}));  // no temporary left
}

TEST_F(RunDir, PageWriterDestroyedWithoutFinishEndsItsThread) {
  for (int i = 0; i < 20; ++i) {
    meridian::report::PageWriter writer(dir.string());
    writer.request();
  }  // each destructor waits for the write in progress and starts no other
  for (const auto& e : fs::directory_iterator(dir))  // a page written whole, or none; no temporary
    EXPECT_EQ(e.path().filename(), "report.html");
}

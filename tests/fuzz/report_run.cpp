// A run directory as `meridian report` reads it: metrics.csv, health.jsonl, attempts.jsonl,
// config.yaml and a rank's log. The first byte chooses which file holds the input; the others are the
// seed run's (tests/fuzz/base/run). The page never throws for what the directory holds.
#include <filesystem>

#include "fuzz.h"
#include "meridian/report/report.h"

using namespace meridian;
namespace fs = std::filesystem;

MERIDIAN_FUZZ_TARGET(report_run) {
  static const char* names[] = {"metrics.csv", "health.jsonl", "attempts.jsonl", "config.yaml", "logs/rank_0.log"};
  const std::string dir = fuzz::scratch() + "/run";
  static const bool copied = [&] {
    fs::copy(MERIDIAN_FUZZ_BASE "/run", dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    return true;
  }();
  (void)copied;
  const char* name = names[fuzz::take_choice(bytes, 5)];
  const std::string original = fuzz::scratch() + "/original";
  fs::copy_file(dir + "/" + name, original, fs::copy_options::overwrite_existing);
  fuzz::write(std::string("run/") + name, bytes);
  try {
    report::PageStats stats;
    report::render_page(dir, &stats);
  } catch (const std::exception& e) {
    fuzz::finding("report_run", std::string("render_page threw for ") + name + ": " + e.what(), bytes.size());
  } catch (...) {
    fuzz::finding("report_run", std::string("render_page threw a non-std exception for ") + name, bytes.size());
  }
  fs::copy_file(original, dir + "/" + name, fs::copy_options::overwrite_existing);
}

// A run directory as `meridian report` reads it: metrics.csv, health.jsonl, attempts.jsonl,
// config.yaml and a rank's log. The first byte chooses which file holds the input; the others are the
// seed run's (tests/fuzz/base/run). The page never throws for what the directory holds.
#include <map>
#include <string>

#include "fuzz.h"
#include "meridian/report/report.h"

using namespace meridian;

MERIDIAN_FUZZ_TARGET(report_run) {
  static const char* names[] = {"metrics.csv", "health.jsonl", "attempts.jsonl", "config.yaml", "logs/rank_0.log"};
  // The seed run, copied once; an input replaces one file and the original is written back after
  // (fuzz::read and write: the restore once used std::filesystem::copy_file, whose EINTR under
  // libFuzzer's SIGALRM was the only report_run finding of the campaigns).
  static const std::map<std::string, std::string> originals = [] {
    fuzz::copy_dir(MERIDIAN_FUZZ_BASE "/run", "run");
    std::map<std::string, std::string> m;
    for (const char* name : names) m[name] = fuzz::read(std::string(MERIDIAN_FUZZ_BASE "/run/") + name);
    return m;
  }();
  const char* name = names[fuzz::take_choice(bytes, 5)];
  fuzz::write(std::string("run/") + name, bytes);
  try {
    report::PageStats stats;
    report::render_page(fuzz::scratch() + "/run", &stats);
  } catch (const std::exception& e) {
    fuzz::finding("report_run", std::string("render_page threw for ") + name + ": " + e.what(), bytes.size());
  } catch (...) {
    fuzz::finding("report_run", std::string("render_page threw a non-std exception for ") + name, bytes.size());
  }
  fuzz::write(std::string("run/") + name, originals.at(name));
}

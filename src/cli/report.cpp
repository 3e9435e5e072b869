// `meridian report RUN_DIR [--out FILE.html]`: one self-contained HTML page of a run (report/report.h).
#include "meridian/report/report.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"

namespace meridian::cli {

Command report_command() {
  Command c;
  c.name = "report";
  c.summary =
      "Write one self-contained HTML page of a run directory: curves, time per phase, ranks, findings, restarts";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("run", "Run directory (train --run-dir)", cxxopts::value<std::string>()->default_value(""))
        ("out", "The page to write; default RUN_DIR/report.html", cxxopts::value<std::string>()->default_value(""));
    // clang-format on
    o.parse_positional({"run"});
    o.positional_help("RUN_DIR");
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const std::string run = p["run"].as<std::string>();
    if (run.empty()) throw UserError("give a run directory: meridian report RUN_DIR [--out FILE.html]");
    std::string out = p["out"].as<std::string>();
    if (out.empty()) out = run + "/report.html";
    if (!std::filesystem::is_directory(run)) throw UserError("'" + run + "' is not a directory (give a run directory)");
    const auto parent = std::filesystem::absolute(out).parent_path();
    if (!std::filesystem::is_directory(parent))
      throw UserError("--out " + out + ": no directory " + parent.string() + " to write the page in");
    if (rt.rank() != 0) return 0;  // one page, from rank 0; the others have nothing to do
    const auto t0 = std::chrono::steady_clock::now();
    const report::PageStats s = report::write_page(run, out);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("report: wrote %s in %.2f s (%.1f KB; %lld metrics rows, %lld points shown)\n", out.c_str(), seconds,
                s.bytes / 1e3, (long long)s.metric_rows, (long long)s.points_shown);
    for (const auto& problem : s.problems) std::printf("  missing or cut: %s\n", problem.c_str());
    return 0;
  };
  return c;
}

}  // namespace meridian::cli

// Private to report: a run directory read into the JSON object the page's script draws. Not collective.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "meridian/report/report.h"

namespace meridian::report {

// {"run", "generated", "problems": [text], "series": {name: {"x", "y"}}, "heatmap": {"steps", "ranks",
//  "hosts", "busy_s": [rank][report]} | null, "findings": [{"step", "time", "kind", "text"}], "attempts": [{"start",
//  "end", "last_step", "lost"}], "config": text | null, "checkpoints": [{"name", "bytes", "step",
//  "time", "latest"}], "errors": [text]}. Counts rows, points and problems into `stats`. UserError
// when `dir` is not a directory; whatever is in it never throws.
nlohmann::json read_run(const std::string& dir, PageStats& stats);

}  // namespace meridian::report

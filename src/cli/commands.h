// The `meridian` subcommands. Each command declares its options on a cxxopts::Options (parsed on
// every rank before MPI starts) and runs with the Runtime. Run functions are collective: every rank
// calls them; they return the process exit code.
#pragma once

#include <cxxopts.hpp>
#include <functional>
#include <string>
#include <vector>

namespace meridian {
class Config;
}

namespace meridian::comm {
class Runtime;
}

namespace meridian::cli {

struct Command {
  std::string name;     // as typed: "info", "bench comm"
  std::string summary;  // one line for `meridian --help`
  std::function<void(cxxopts::Options&)> add_options;
  std::function<int(const cxxopts::ParseResult&, comm::Runtime&)> run;
};

Command info_command();
Command bench_comm_command();
Command bench_ddp_command();
Command bench_io_command();
Command prep_image_text_command();
Command prep_detection_command();
Command prep_text_command();
Command prep_synthetic_command();
Command inspect_command();
Command train_command();
Command config_command();
Command bench_train_command();
Command eval_command();
Command bench_ckpt_command();
Command bench_memory_command();
Command model_command();
Command export_command();
Command embed_command();
Command generate_command();
Command predict_command();
Command doctor_command();

// Applies every `--set key=value` of a parse result to `config`, in order; UserError on a malformed one.
void apply_overrides(const cxxopts::ParseResult& parsed, Config& config);
// "name value  name value ..." with two decimals, as train and eval print metrics.
std::string metrics_text(const std::vector<std::pair<std::string, double>>& metrics);  // train::Metrics

}  // namespace meridian::cli

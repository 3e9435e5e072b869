// The `meridian` subcommands. Each command declares its options on a cxxopts::Options (parsed on
// every rank before MPI starts) and runs with the Runtime. Run functions are collective: every rank
// calls them; they return the process exit code.
#pragma once

// One --set value is one value: a YAML list (task.prompts=["a {}", "the {}"]) keeps its commas.
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>
#include <functional>
#include <string>
#include <vector>

#include "meridian/tasks/model_source.h"

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
  // info, doctor: a GPU this build cannot run is reported (Runtime::gpu_build) instead of refused.
  bool reports_gpu_build = false;
};

Command info_command();
Command bench_comm_command();
Command bench_ddp_command();
Command bench_gemm_command();
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
Command report_command();
Command generate_command();
Command predict_command();
Command doctor_command();

// Declares --model (`help`: what the command does with it) and its alias --checkpoint.
void add_model_option(cxxopts::Options& options, const std::string& help);
// Not collective (every rank reads the files): the model named by --model (or --checkpoint, or eval's
// --init), opened by tasks::open_model with the --set keys and then `adjust`'s; rank 0 logs what was
// loaded. UserError when none is given, or two.
tasks::ModelSource open_model_option(const cxxopts::ParseResult& parsed, const comm::Runtime& runtime,
                                     const std::string& command, const std::function<void(Config&)>& adjust = {});

// Applies every `--set key=value` of a parse result to `config`, in order; UserError on a malformed one.
void apply_overrides(const cxxopts::ParseResult& parsed, Config& config);
// "name value  name value ..." with two decimals, as train and eval print metrics.
std::string metrics_text(const std::vector<std::pair<std::string, double>>& metrics);  // train::Metrics

}  // namespace meridian::cli

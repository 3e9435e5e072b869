// meridian: data-parallel training across machines. Entry point and subcommand dispatch.
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "commands.h"
#include "meridian/build_config.h"
#include "meridian/comm/communicator.h"
#include "meridian/comm/gpu_build.h"
#include "meridian/comm/probe.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/log.h"
#include "meridian/core/version.h"
#include "meridian/git.h"
#ifdef MERIDIAN_WITH_DATA
#include "meridian/data/hdf5_info.h"
#endif

namespace {

using meridian::cli::Command;

std::vector<Command> all_commands() {
  using namespace meridian::cli;
  std::vector<Command> commands{info_command(),      doctor_command(),     bench_comm_command(),
                                bench_ddp_command(), bench_gemm_command(), report_command()};
#ifdef MERIDIAN_WITH_DATA
  for (auto c : {prep_image_text_command(), prep_detection_command(), prep_text_command(), prep_synthetic_command(),
                 inspect_command(), bench_io_command(), train_command(), bench_train_command(), config_command(),
                 eval_command(), bench_ckpt_command(), bench_memory_command(), model_command(), export_command(),
                 embed_command(), generate_command(), predict_command()})
    commands.push_back(c);
#endif
  return commands;
}

// Before MPI is up the launcher's environment tells the rank; only rank 0 prints usage errors.
bool launcher_rank0() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::string(v) == "0";
  return true;
}

std::string version_text() {
  std::string s =
      std::string("meridian ") + MERIDIAN_VERSION + " (git " + MERIDIAN_GIT + ", " + MERIDIAN_BUILD_TYPE + ")\n";
  s += std::string("  LibTorch ") + TORCH_VERSION + "\n";
  s += "  CUDA     yes: " + meridian::comm::cuda_build_text() + "\n";
  s += "  GPUs     " + meridian::comm::cuda_build_summary(meridian::comm::this_cuda_build()) + "\n";
  s += "  NCCL     " + meridian::comm::nccl_version() + "\n";
#ifdef MERIDIAN_WITH_DATA
  s += "  " + meridian::data::hdf5_version() + "\n";
#else
  s += "  HDF5     data area not built (-DMERIDIAN_WITH_DATA=OFF)\n";
#endif
  s += "  MPI      " + meridian::comm::mpi_library_version() + "\n";
  return s;
}

void add_common_options(cxxopts::Options& options) {
  // clang-format off
  options.add_options("common")
      ("h,help", "Show this help")
      ("log-level", "Log level: trace, debug, info, warn, error, critical, off", cxxopts::value<std::string>()->default_value("info"))
      ("run-dir", "Run directory; every rank logs to <run-dir>/logs/rank_<r>.log", cxxopts::value<std::string>()->default_value(""))
      ("device", "Device: auto (cuda:<local rank> when CUDA is available), cpu or cuda", cxxopts::value<std::string>()->default_value("auto"))
      ("threads", "Torch intra-op threads per rank; 0: OMP_NUM_THREADS, else the machine's free cores / the job's ranks on it (train's log says why)", cxxopts::value<int>()->default_value("0"))
      ("comm-timeout", "Seconds a collective may take before the watchdog aborts the job", cxxopts::value<double>()->default_value("600"));
  // clang-format on
}

// The commands whose names start with `prefix` ("" for all, "prep " for prep's), one per line.
void print_commands(const std::string& prefix) {
  for (const auto& c : all_commands())
    if (c.name.rfind(prefix, 0) == 0)
      std::cout << "  " << c.name << std::string(18 - std::min<size_t>(17, c.name.size()), ' ') << c.summary << "\n";
}

void print_usage() {
  std::cout << "meridian: data-parallel deep-learning training across machines (MPI + NCCL + LibTorch)\n\n"
               "Usage: mpirun -np N meridian <command> [options]\n"
               "       meridian --version | --help | <command> --help\n\nCommands:\n";
  print_commands("");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace meridian;
  set_command_line(argc, argv);
  const std::string first = argc > 1 ? argv[1] : "";
  if (first.empty() || first == "-h" || first == "--help") {
    if (launcher_rank0()) print_usage();
    return first.empty() ? kExitUserError : kExitOk;
  }
  if (first == "--version") {
    if (launcher_rank0()) std::cout << version_text();
    return kExitOk;
  }

  // Find the command: one or two words ("info", "bench comm").
  const Command* command = nullptr;
  int words = 0;
  const auto commands = all_commands();
  for (const auto& c : commands) {
    const bool two = c.name.find(' ') != std::string::npos;
    const std::string typed = two && argc > 2 ? first + " " + argv[2] : first;
    if (typed == c.name) command = &c, words = two ? 2 : 1;
  }
  // A group of two-word commands ("prep", "bench") with --help or nothing after it: its commands.
  const bool group = std::any_of(commands.begin(), commands.end(),
                                 [&](const Command& c) { return c.name.rfind(first + " ", 0) == 0; });
  const std::string second = argc > 2 ? argv[2] : "";
  if (!command && group && argc <= 3 && (second.empty() || second == "-h" || second == "--help")) {
    if (launcher_rank0()) {
      std::cout << "Usage: mpirun -np N meridian " << first << " <command> [options]\n"
                << "       meridian " << first << " <command> --help\n\nCommands:\n";
      print_commands(first + " ");
    }
    return second.empty() ? kExitUserError : kExitOk;
  }
  if (!command) {
    if (launcher_rank0()) {
      const bool two_words = argc > 2 && group;
      std::cerr << "meridian: unknown command '" << first << (two_words ? std::string(" ") + argv[2] : "") << "'\n";
      print_usage();
    }
    return kExitUserError;
  }

  // Parse options on every rank before MPI starts: a bad option is the same error everywhere.
  cxxopts::Options options("meridian " + command->name, command->summary);
  add_common_options(options);
  command->add_options(options);
  std::vector<char*> args{argv[0]};
  for (int i = 1 + words; i < argc; ++i) args.push_back(argv[i]);
  int nargs = static_cast<int>(args.size());
  cxxopts::ParseResult parsed;
  try {
    parsed = options.parse(nargs, args.data());
    if (!parsed.unmatched().empty()) throw UserError("unexpected argument '" + parsed.unmatched().front() + "'");
    if (!parsed.count("help")) {
      log::check_level(parsed["log-level"].as<std::string>());
      const double timeout = parsed["comm-timeout"].as<double>();
      if (!(std::isfinite(timeout) && timeout > 0 && timeout <= 1e7))
        throw UserError("--comm-timeout: must be a number of seconds > 0, got " + std::to_string(timeout));
    }
  } catch (const std::exception& e) {
    if (launcher_rank0()) std::cerr << "meridian " << command->name << ": " << e.what() << " (see --help)\n";
    return kExitUserError;
  }
  if (parsed.count("help")) {
    if (launcher_rank0()) {
      // Every group (a command's own, shared ones such as prep's, common) but "testing": test hooks.
      std::vector<std::string> shown;
      for (const auto& group : options.groups())
        if (group != "testing") shown.push_back(group);
      std::cout << options.help(shown);
    }
    return kExitOk;
  }

  comm::RuntimeOptions ropts;
  ropts.device = parsed["device"].as<std::string>();
  ropts.threads = parsed["threads"].as<int>();
  ropts.comm_timeout_s = parsed["comm-timeout"].as<double>();
  ropts.refuse_unusable_gpu = !command->reports_gpu_build;
  std::unique_ptr<comm::Runtime> runtime;
  try {
    runtime = std::make_unique<comm::Runtime>(&argc, &argv, ropts);
    log::init(runtime->rank(), {parsed["log-level"].as<std::string>(), parsed["run-dir"].as<std::string>()});
    const int rc = command->run(parsed, *runtime);
    runtime.reset();  // MPI_Finalize
    return rc;
  } catch (const UserError& e) {
    // The error may be on this rank only: end every rank with the same code rather than leave them waiting.
    const std::string msg = "meridian " + command->name + ": " + e.what();
    if (!runtime || runtime->size() == 1) {
      std::cerr << msg << std::endl;
      return kExitUserError;
    }
    comm::abort_job(where() + " " + msg, kExitUserError);
  } catch (const std::exception& e) {
    comm::abort_job(where() + " meridian " + command->name + ": fatal: " + e.what(), kExitFatal);
  }
}

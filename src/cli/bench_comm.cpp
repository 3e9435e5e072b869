// `meridian bench comm`: collective bandwidth sweep (see include/meridian/comm/bench.h).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "meridian/comm/bench.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/units.h"

namespace meridian::cli {

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string format_row(const comm::CommBenchRow& r) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%14s %10s %-8s %12llu %12llu %11.1f %8.3f %8.3f %7lld", r.collective.c_str(),
                r.dtype.c_str(), r.op.c_str(), (unsigned long long)r.bytes, (unsigned long long)r.count, r.time_us,
                r.algbw_gbs, r.busbw_gbs, (long long)r.wrong);
  std::string s = buf;
  if (r.ref_time_us >= 0) {
    std::snprintf(buf, sizeof(buf), " %11.1f %8.3f %6.2f", r.ref_time_us, r.ref_busbw_gbs, r.ref_time_us / r.time_us);
    s += buf;
  }
  return s;
}

}  // namespace

Command bench_comm_command() {
  Command c;
  c.name = "bench comm";
  c.summary = "Collective bandwidth sweep with correctness check and a raw-MPI reference";
  c.add_options = [](cxxopts::Options& o) {
    o.custom_help(
        "[options]   (busbw: allreduce = algbw*2(n-1)/n; allgather, reduce_scatter = algbw*(n-1)/n; broadcast = "
        "algbw)");
    // clang-format off
    o.add_options()
        ("backend", "Communicator: auto (nccl on CUDA devices, else mpi), mpi or nccl", cxxopts::value<std::string>()->default_value("auto"))
        ("min-bytes", "Smallest message (suffix K, M, G)", cxxopts::value<std::string>()->default_value("8"))
        ("max-bytes", "Largest message (suffix K, M, G)", cxxopts::value<std::string>()->default_value("256M"))
        ("factor", "Size multiplier between steps", cxxopts::value<double>()->default_value("2"))
        ("ops", "Collectives, comma-separated: allreduce, broadcast, allgather, reduce_scatter", cxxopts::value<std::string>()->default_value("allreduce"))
        ("dtypes", "Data types, comma-separated: float32, float64, bfloat16, float16, int32, int64", cxxopts::value<std::string>()->default_value("float32"))
        ("op", "Reduction: sum, avg, max, min", cxxopts::value<std::string>()->default_value("sum"))
        ("warmup", "Untimed iterations per size", cxxopts::value<int>()->default_value("3"))
        ("iters", "Timed iterations per size", cxxopts::value<int>()->default_value("10"))
        ("no-reference", "Skip the raw MPI reference columns")
        ("blocking", "Time blocking calls one at a time (default: back-to-back async operations, then wait)")
        ("json", "Also write the table to this JSON file (rank 0)", cxxopts::value<std::string>()->default_value(""));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    comm::CommBenchOptions o;
    o.min_bytes = parse_bytes(p["min-bytes"].as<std::string>(), "--min-bytes");
    o.max_bytes = parse_bytes(p["max-bytes"].as<std::string>(), "--max-bytes");
    o.factor = p["factor"].as<double>();
    o.collectives = split_list(p["ops"].as<std::string>());
    o.dtypes = split_list(p["dtypes"].as<std::string>());
    o.op = comm::parse_reduce_op(p["op"].as<std::string>());
    o.warmup = p["warmup"].as<int>();
    o.iters = p["iters"].as<int>();
    o.reference = !p.count("no-reference");
    o.blocking = p.count("blocking") > 0;
    comm::validate(o);
    const std::string backend_name = p["backend"].as<std::string>();
    comm::Backend backend = comm::default_backend(rt);
    if (backend_name == "mpi")
      backend = comm::Backend::MPI;
    else if (backend_name == "nccl")
      backend = comm::Backend::NCCL;
    else if (backend_name != "auto")
      throw UserError("--backend: unknown backend '" + backend_name + "' (expected auto, mpi or nccl)");

    // Check the --json file is writable before the sweep, and agree on it, so an error ends every rank alike.
    const std::string json_path = p["json"].as<std::string>();
    std::string json_error;
    if (rt.rank() == 0 && !json_path.empty() && !std::ofstream(json_path))
      json_error = json_path + ": cannot write the --json file";
    if (!rt.all_true(json_error.empty()))
      throw UserError(json_error.empty() ? "--json: rank 0 cannot write the file" : json_error);

    auto communicator = comm::make_communicator(rt, backend);
    if (rt.rank() == 0) {
      std::printf("# meridian bench comm: %d ranks on %d node(s), backend %s, %d warmup + %d timed %s iterations\n",
                  rt.size(), rt.node_count(), comm::to_string(backend), o.warmup, o.iters,
                  o.blocking ? "blocking" : "async");
      std::printf(
          "# time: slowest rank's mean; wrong: elements differing from the closed-form result, summed over ranks\n");
      std::printf("%14s %10s %-8s %12s %12s %11s %8s %8s %7s", "collective", "dtype", "op", "bytes", "count",
                  "time(us)", "algbw", "busbw", "wrong");
      if (o.reference) std::printf(" %11s %8s %6s", "mpi_us", "mpi_bus", "speedup");
      std::printf("\n%70s %s\n", "(GB/s)", o.reference ? "                 (raw MPI, one call)" : "");
      std::fflush(stdout);
    }
    const auto rows = comm::run_comm_bench(rt, *communicator, o, [&](const comm::CommBenchRow& r) {
      if (rt.rank() == 0) {
        std::printf("%s\n", format_row(r).c_str());
        std::fflush(stdout);
      }
    });
    int64_t wrong = 0;
    for (const auto& r : rows) wrong += r.wrong;
    if (rt.rank() == 0) {
      std::printf("# %s: %lld wrong elements in %zu rows\n", wrong == 0 ? "PASS" : "FAIL", (long long)wrong,
                  rows.size());
      if (!json_path.empty()) {
        nlohmann::json j;
        j["ranks"] = rt.size();
        j["nodes"] = rt.node_count();
        j["backend"] = comm::to_string(backend);
        for (const auto& r : rows) {
          j["rows"].push_back({{"collective", r.collective},
                               {"dtype", r.dtype},
                               {"op", r.op},
                               {"bytes", r.bytes},
                               {"count", r.count},
                               {"time_us", r.time_us},
                               {"algbw_gbs", r.algbw_gbs},
                               {"busbw_gbs", r.busbw_gbs},
                               {"wrong", r.wrong},
                               {"mpi_time_us", r.ref_time_us},
                               {"mpi_busbw_gbs", r.ref_busbw_gbs}});
        }
        std::ofstream out(json_path);
        if (!(out << j.dump(2) << "\n")) throw UserError(json_path + ": cannot write the --json file");
      }
    }
    return wrong == 0 ? 0 : 1;
  };
  return c;
}

}  // namespace meridian::cli

#include "run_files.h"

#include <chrono>
#include <filesystem>
#include <iomanip>

#include "meridian/core/clock.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "meridian/train/tensorboard.h"

namespace meridian::train {

namespace fs = std::filesystem;

RunFiles::RunFiles(const std::string& run_dir, const std::string& config_yaml) : dir_(run_dir) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw SystemError("cannot create the run directory '" + dir_ + "': " + ec.message());
  write_file_atomically(dir_ + "/config.yaml", config_yaml + "\n");
  const std::string csv = dir_ + "/metrics.csv";
  const bool fresh = !fs::exists(csv) || fs::file_size(csv) == 0;
  csv_.open(csv, std::ios::app);
  if (!csv_) throw SystemError("cannot open '" + csv + "' for writing");
  if (fresh) csv_ << "step,wall_time,name,value\n";
  csv_ << std::setprecision(9);
  events_ = std::make_unique<EventWriter>(dir_ + "/tensorboard");
}

RunFiles::~RunFiles() = default;

void RunFiles::write(int64_t step, const std::string& prefix, const Metrics& metrics) {
  const double now = unix_seconds();
  for (const auto& [name, value] : metrics) {
    const std::string tag = prefix + "/" + name;
    csv_ << step << ',' << std::fixed << std::setprecision(3) << now << std::defaultfloat << std::setprecision(9) << ','
         << tag << ',' << value << '\n';
    events_->add_scalar(tag, step, value, now);
  }
  csv_.flush();
  if (!csv_) throw SystemError("cannot write '" + dir_ + "/metrics.csv' (disk full?)");
  events_->flush();
}

}  // namespace meridian::train

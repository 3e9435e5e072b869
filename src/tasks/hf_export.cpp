#include "meridian/tasks/hf_export.h"

#include <fmt/format.h>

#include <filesystem>

#include "meridian/core/error.h"
#include "meridian/core/json_file.h"
#include "meridian/models/hf_checkpoint.h"

namespace meridian::tasks {

std::string HfExport::summary(const std::string& dtype, const std::string& out, const std::string& auto_class) const {
  return fmt::format(
      "export: {} tensors, {:.1f} MiB {} in {} weight file(s), tokenizer from {}: {} (transformers: "
      "{}.from_pretrained(\"{}\"))",
      tensors, double(bytes) / (1 << 20), dtype, files, tokenizer, out, auto_class, out);
}

namespace fs = std::filesystem;

HfExportDir::HfExportDir(const std::string& out, const std::string& dtype) {
  if (dtype != "f32" && dtype != "bf16") throw UserError("export: --dtype must be f32 or bf16, got '" + dtype + "'");
  dtype_ = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  out_ = fs::path(out).lexically_normal().string();
  while (out_.size() > 1 && out_.back() == '/') out_.pop_back();  // "dir/" -> "dir", so "dir.partial" is beside it
  if (fs::exists(out_)) throw UserError(out_ + ": exists; export writes a new directory (remove it or choose another)");
  partial_ = out_ + ".partial";
  if (fs::exists(partial_))
    throw UserError(partial_ + ": exists (an interrupted export?): remove it, then export again");
  std::error_code error;
  fs::create_directories(partial_, error);
  if (error) throw SystemError(partial_ + ": cannot create the directory: " + error.message());
}

HfExportDir::~HfExportDir() {
  std::error_code ignored;
  if (!committed_) fs::remove_all(partial_, ignored);
}

std::string HfExportDir::file(const std::string& name) const { return (fs::path(partial_) / name).string(); }

void HfExportDir::write_weights(models::NamedTensors tensors, int64_t max_shard_bytes) {
  for (auto& [name, t] : tensors) {
    t = t.detach().to(t.is_floating_point() ? dtype_ : t.scalar_type()).cpu().contiguous();  // counters stay integers
    summary_.bytes += int64_t(t.numel()) * int64_t(t.element_size());
  }
  summary_.tensors = int64_t(tensors.size());
  summary_.files = models::write_hf_weights(partial_, tensors, max_shard_bytes);
}

bool HfExportDir::copy_if_there(const std::string& from_dir, const std::string& name) {
  const fs::path source = fs::path(from_dir) / name;
  if (!fs::is_regular_file(source)) return false;
  fs::copy_file(source, fs::path(partial_) / name, fs::copy_options::overwrite_existing);
  return true;
}

void HfExportDir::write_json(const std::string& name, const nlohmann::json& value) {
  write_json_file(file(name), value);
}

HfExport HfExportDir::commit(const std::string& tokenizer_source) {
  fs::rename(partial_, out_);
  committed_ = true;
  summary_.tokenizer = tokenizer_source;
  return summary_;
}

}  // namespace meridian::tasks

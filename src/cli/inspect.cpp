// `meridian inspect FILE.h5`: validates a dataset against the format and summarises it.
#include <cstdio>

#include "commands.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/dataset_reader.h"
#include "meridian/data/format.h"

namespace meridian::cli {

namespace {
// "chunk [1, 256, 256, 3]", or "contiguous" for a dataset stored without chunks (h5py's default).
std::string layout_text(const std::vector<uint64_t>& chunk) {
  if (chunk.empty()) return "contiguous";
  std::string s = "chunk [";
  for (size_t i = 0; i < chunk.size(); ++i) s += (i ? ", " : "") + std::to_string(chunk[i]);
  return s + "]";
}

// A checkpoint: contents, step, world size, and every checksum verified (DataError on a mismatch).
int inspect_checkpoint(const std::string& path) {
  const ckpt::Reader r(path);
  auto num = [&](const char* name) { return (long long)r.int_attribute(name).value_or(-1); };
  std::printf("%s: meridian checkpoint v%lld, step %lld, written by %lld ranks (%s, %s)\n", path.c_str(),
              num("format_version"), num("step"), num("world_size"),
              r.string_attribute("created_by").value_or("?").c_str(), r.string_attribute("time").value_or("?").c_str());
  std::printf("  data         epoch %lld, global position %lld, global batch %lld, samples seen %lld\n", num("epoch"),
              num("position"), num("global_batch"), num("samples_seen"));
  std::printf("  bad steps    %lld (%lld in a row at the save)\n", num("bad_steps"), num("bad_in_a_row"));
  int64_t model = 0, optim = 0;
  for (const auto& name : r.names()) {
    const at::Tensor t = r.read(name);  // verifies this dataset's checksums
    (name.rfind("model/", 0) == 0 ? model : optim) += t.numel();
    if (name.rfind("model/", 0) == 0)
      std::printf("  %-52s %-10s %s\n", name.c_str(), c10::toString(t.scalar_type()), c10::str(t.sizes()).c_str());
  }
  r.verify();  // per-rank datasets too
  std::printf("  model        %lld values; optimizer state %lld values; %.1f MB; all checksums verified\n",
              (long long)model, (long long)optim, r.bytes() / 1e6);
  return 0;
}
}  // namespace

Command inspect_command() {
  Command c;
  c.name = "inspect";
  c.summary = "Validate a dataset or checkpoint file and summarise it (checkpoints: contents, step, checksums)";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("file", "Dataset file (.h5)", cxxopts::value<std::string>()->default_value(""))
        ("samples", "Captions to decode and show", cxxopts::value<int>()->default_value("3"))
        ("no-verify", "Read a checkpoint whose whole-file checksum does not match anyway");
    // clang-format on
    o.parse_positional({"file"});
    o.positional_help("FILE.h5");
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const std::string path = p["file"].as<std::string>();
    if (path.empty()) throw UserError("inspect: give the dataset file (meridian inspect FILE.h5)");
    if (rt.rank() != 0) return 0;  // a local check: rank 0 reports
    ckpt::set_verify_checksums(!p.count("no-verify"));
    if (ckpt::is_checkpoint(path)) return inspect_checkpoint(path);
    const data::DatasetInfo info = data::validate_dataset(path);
    std::printf("%s: valid %s dataset, format %s v%lld, %.1f MB\n", path.c_str(), info.kind.c_str(), data::kFormatName,
                (long long)info.format_version, info.file_bytes / 1e6);
    std::printf("  created by   %s\n", info.created_by.c_str());
    std::printf("  split        %s\n", info.split.empty() ? "(all)" : info.split.c_str());
    if (info.kind == "text") {
      const data::DatasetSummary summary = data::summarize(info, p["samples"].as<int>());
      std::printf("  documents    %lld\n", (long long)info.count);
      std::printf("  tokens       %lld (%.1f per document), %.1f%% with loss (responses)\n",
                  (long long)info.token_count, double(info.token_count) / std::max<int64_t>(1, info.count),
                  100 * summary.supervised_fraction);
      std::printf("  tokenizer    sentencepiece, vocab %lld, eos %lld\n", (long long)info.vocab_size,
                  (long long)info.eos_id);
      for (const auto& s : summary.examples)
        std::printf("  %s\n    prompt  : %s\n    response: %s\n", s.name.c_str(), s.caption.c_str(), s.decoded.c_str());
      return 0;
    }
    if (info.image_encoding == "jpeg") {
      const double raw = double(info.height * info.width * info.channels),
                   each = double(info.encoded_bytes) / std::max<int64_t>(1, info.count);
      std::printf("  images       %lld x %lldx%lldx%lld JPEG, %.1f KB each on average (%.3fx raw), %s\n",
                  (long long)info.count, (long long)info.height, (long long)info.width, (long long)info.channels,
                  each / 1e3, each / raw, layout_text(info.image_chunk).c_str());
    } else {
      std::printf("  images       %lld x %lldx%lldx%lld uint8, %s\n", (long long)info.count, (long long)info.height,
                  (long long)info.width, (long long)info.channels, layout_text(info.image_chunk).c_str());
    }
    const bool detection = info.kind == "detection";
    if (detection) {
      std::printf("  boxes        %lld (%.2f per image; x_min, y_min, x_max, y_max in pixels)\n",
                  (long long)info.box_count, double(info.box_count) / std::max<int64_t>(1, info.count));
    } else {
      std::printf("  captions     %lld (%lld per image), %lld tokens each\n",
                  (long long)(info.count * info.captions_per_sample), (long long)info.captions_per_sample,
                  (long long)info.context_length);
      std::printf("  tokenizer    sentencepiece, vocab %lld, pad %lld, eos %lld\n", (long long)info.vocab_size,
                  (long long)info.pad_id, (long long)info.eos_id);
    }
    const data::DatasetSummary summary = data::summarize(info, p["samples"].as<int>());
    std::printf("  classes      %zu%s\n", info.class_names.size(), detection ? " (boxes per class)" : "");
    for (size_t k = 0; k < info.class_names.size(); ++k)
      std::printf("    %-20s %lld\n", info.class_names[k].c_str(), (long long)summary.class_counts.at(k));
    if (summary.unlabelled)
      std::printf("    %-20s %lld\n", detection ? "(images, no box)" : "(no class)", (long long)summary.unlabelled);
    for (const auto& s : summary.examples)
      std::printf("  sample %s\n    stored : %s\n    decoded: %s\n", s.name.c_str(), s.caption.c_str(),
                  s.decoded.c_str());
    return 0;
  };
  return c;
}

}  // namespace meridian::cli

#include "prep_job.h"

#include <unistd.h>

#include <filesystem>
#include <optional>

#include "dataset_index.h"
#include "h5.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/format.h"
#include "meridian/data/tokenizer.h"

namespace fs = std::filesystem;

namespace meridian::data {

std::string agree_error(const comm::Runtime& rt, const std::string& mine) {
  for (const auto& e : rt.allgather(mine))
    if (!e.empty()) return e;
  return {};
}

Tokenizer shared_tokenizer(const comm::Runtime& rt, const PrepCommon& o,
                           const std::function<std::vector<std::string>()>& corpus, bool keep_whitespace) {
  std::string bytes, error;
  // lower_case, strip_punctuation, pad_id, eos_id, add_bos, prefix (TextRules)
  int32_t rules[6] = {0, 0, -1, -1, 1, 0};
  if (rt.rank() == 0) {
    try {
      std::optional<Tokenizer> tok;
      if (o.tokenizer.empty()) {
        tok = Tokenizer::train(corpus(), o.vocab_size, keep_whitespace);
      } else if (fs::is_directory(o.tokenizer)) {
        tok = Tokenizer::from_hf_dir(o.tokenizer);  // a Hugging Face checkpoint's spiece.model and its rules
      } else if (fs::path(o.tokenizer).extension() == ".h5" || is_index_path(o.tokenizer)) {
        // Another dataset's tokenizer (e.g. the train split's, for the test split).
        const auto info = validate_dataset(o.tokenizer);
        if (info.kind == "detection")
          throw DataError(o.tokenizer, "--tokenizer", "a detection dataset has no tokenizer");
        tok = dataset_tokenizer(o.tokenizer);
      } else {
        tok = Tokenizer::from_file(o.tokenizer);
      }
      bytes = tok->model_bytes();
      rules[0] = tok->rules().lower_case, rules[1] = tok->rules().strip_punctuation;
      rules[2] = tok->rules().pad_id, rules[3] = tok->rules().eos_id, rules[4] = tok->rules().add_bos;
      rules[5] = int32_t(tok->rules().prefix);
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  error = agree_error(rt, error);
  if (!error.empty()) throw UserError(error);
  uint64_t len = bytes.size();
  rt.broadcast_bytes(&len, sizeof(len), 0);
  bytes.resize(len);
  rt.broadcast_bytes(bytes.data(), len, 0);
  rt.broadcast_bytes(rules, sizeof rules, 0);
  TextRules r;
  r.lower_case = rules[0] != 0, r.strip_punctuation = rules[1] != 0, r.pad_id = rules[2], r.eos_id = rules[3];
  r.add_bos = rules[4] != 0, r.prefix = TextRules::Prefix(rules[5]);
  return Tokenizer::from_bytes(bytes, o.tokenizer.empty() ? "trained tokenizer" : o.tokenizer).with_rules(r);
}

void check_output(const comm::Runtime& rt, const PrepCommon& o) {
  std::string error;
  if (rt.rank() == 0) {
    const fs::path out(o.out);
    const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
    if (fs::is_directory(out))
      error = o.out + ": is a directory; --out names the dataset file to write";
    else if (fs::exists(out) && !o.overwrite && !o.resume && !o.append)
      error = o.out + ": exists (pass --overwrite to replace it" +
              (is_index_path(o.out) ? std::string(", --resume to finish an interrupted prep, --append to add inputs")
                                    : std::string()) +
              ")";
    else if (!fs::is_directory(dir))
      error = o.out + ": directory " + dir.string() + " does not exist";
    else if (access(dir.c_str(), W_OK) != 0)
      error = o.out + ": directory " + dir.string() + " is not writable";
  }
  error = agree_error(rt, error);
  if (!error.empty()) throw UserError(error);
}

void leaving_nothing_on_failure(const comm::Runtime& rt, const std::string& tmp, const std::function<void()>& write) {
  try {
    write();
  } catch (...) {
    if (rt.rank() == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }
}

void check_same_inputs(const comm::Runtime& rt, int64_t count, const std::vector<std::string>& class_names) {
  std::string mine = std::to_string(count);
  for (const auto& c : class_names) mine += "|" + c;
  const auto all = rt.allgather(mine);
  const auto hosts = rt.allgather(rt.host());
  for (int r = 1; r < rt.size(); ++r)
    if (all[r] != all[0])
      throw UserError("prep: rank " + std::to_string(r) + " on " + hosts[r] + " sees different inputs than rank 0 on " +
                      hosts[0] + " (" + all[r].substr(0, all[r].find('|')) + " vs " +
                      all[0].substr(0, all[0].find('|')) +
                      " entries, or other classes): are the input paths the same files on every node?");
}

}  // namespace meridian::data

// The dataset index that prep --resume continues and prep --append adds to (run_image_job's
// many-files output; see prep_job.h).
#include <filesystem>

#include "dataset_index.h"
#include "meridian/core/error.h"
#include "meridian/data/format.h"
#include "prep_job.h"

namespace fs = std::filesystem;

namespace meridian::data {

IndexPlan plan_index(const PrepCommon& o, const ImageJob& job) {
  IndexPlan plan;
  plan.index.kind = job.kind;
  if (!o.resume && !o.append) return plan;
  if (o.resume && o.append) throw UserError("--resume and --append: give one (resume finishes, append adds)");
  if (!fs::exists(o.out))
    throw UserError(std::string(o.resume ? "--resume" : "--append") + ": " + o.out + " does not exist");
  plan.index = read_index(o.out);
  if (plan.index.kind != job.kind)
    throw DataError(o.out, "field 'kind'", "is '" + plan.index.kind + "', this prep writes '" + job.kind + "'");
  if (o.append) {
    if (!plan.index.complete)
      throw UserError("--append: " + o.out + " is not finished (an interrupted prep?): finish it with --resume first");
    // The new files must read as more rows of the same dataset.
    const DatasetInfo have = validate_dataset(o.out);
    const auto differs = [&](bool d, const std::string& what, const std::string& theirs) {
      if (d) throw UserError("--append: " + what + " differs from " + o.out + "'s (" + theirs + ")");
    };
    differs(have.image_encoding != o.encode, "--encode", have.image_encoding);
    differs(have.height != o.size, "--size", std::to_string(have.height));
    if (job.kind == "image_text") {
      differs(have.captions_per_sample != o.captions_per_image, "--captions-per-image",
              std::to_string(have.captions_per_sample));
      differs(have.context_length != o.context_length, "--context-length", std::to_string(have.context_length));
    }
    differs(!job.class_names.empty() && have.class_names != job.class_names, "the class names",
            std::to_string(have.class_names.size()) + " classes");
    plan.index.complete = false;
    return plan;
  }
  if (plan.index.complete)
    throw UserError("--resume: " + o.out + " is complete, there is nothing to resume (--append adds more inputs)");
  for (const auto& p : plan.index.parts) {
    if (p.source != job.source) continue;
    if (p.source_count != job.count)
      throw UserError("--resume: " + job.source + " has " + std::to_string(job.count) + " entries now, " + p.file +
                      " was made when it had " + std::to_string(p.source_count) +
                      ": not the same inputs (--overwrite starts again)");
    plan.next_input = std::max(plan.next_input, p.last_input);
  }
  return plan;
}

}  // namespace meridian::data

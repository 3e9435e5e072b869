// The loaders' collective open: every rank opens the dataset, the ranks agree that every open
// succeeded, then that every rank sees the same file.
#include "collective_open.h"

#include "meridian/comm/agree.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/dataset_reader.h"

namespace meridian::data {

void require_same_dataset(const comm::Runtime& rt, const std::string& path, const std::string& fingerprint) {
  const auto prints = rt.allgather(fingerprint + " " + rt.host());
  for (int r = 1; r < rt.size(); ++r)
    if (prints[size_t(r)].substr(0, 16) != prints[0].substr(0, 16))
      throw UserError(path + ": rank " + std::to_string(r) + " on " + prints[size_t(r)].substr(17) +
                      " sees a different dataset than rank 0 on " + prints[0].substr(17) +
                      " (size, attributes or content differ): is the data path the same file on every node?");
}

std::unique_ptr<DatasetReader> open_on_every_rank(const comm::Runtime& rt, const std::string& path, IoDriver driver,
                                                  const std::string& kind, const std::string& reader_name) {
  // Open on every rank; agree on success before comparing, so one rank's error is everyone's.
  std::unique_ptr<DatasetReader> reader;
  std::string fingerprint;
  comm::agree<UserError>(
      rt,
      [&] {
        const DatasetInfo info = validate_dataset(path);
        if (info.kind != kind)
          throw DataError(path, "attribute 'kind'",
                          reader_name + " reads '" + kind + "' files, not '" + info.kind + "'");
        reader = std::make_unique<DatasetReader>(info, driver);
        fingerprint = reader->fingerprint();
      },
      [&](const comm::Failure& f) {
        throw UserError(f.rank == rt.rank() ? f.message : "rank " + std::to_string(f.rank) + ": " + f.message);
      });
  require_same_dataset(rt, path, fingerprint);
  return reader;
}

}  // namespace meridian::data

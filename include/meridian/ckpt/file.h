// The checkpoint file: one HDF5 file written collectively through MPI-IO (docs/formats.md,
// "Checkpoint format v1").
//
//   /                          attributes: format = "meridian-checkpoint", format_version = 1, plus
//                              whatever the caller adds (step, world_size, config, ...)
//   /<name>                    a replicated tensor (identical on every rank), in its shape and dtype
//                              (bfloat16/float16 stored as uint16 with attribute dtype); attributes
//                              dtype, crc32c (uint32 per block of rows), block_rows
//   /ranks/<r>/<name>          rank r's own tensor (RNG states), same attributes
//
// Writing: rows of a replicated tensor are split into blocks of about 4 MiB and the blocks into
// contiguous shares, one per rank, so every rank writes (and checksums) its share and the write
// bandwidth adds up; every rank takes part in every collective call, with an empty selection when
// it has nothing to write. Reading is not collective: any process (or h5py) reads any dataset.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meridian/train/state_io.h"

namespace meridian::comm {
class Runtime;
class OwnComm;
}  // namespace meridian::comm

namespace meridian::ckpt {

class Writer : public train::StateWriter {
 public:
  // Collective: creates (truncates) `path` with the MPI-IO driver. SystemError naming the path
  // when it cannot be created. Every collective of the writer runs on `comm` (not owned; a
  // background writer's own duplicate of the world) or, when null, on a duplicate made for it; the
  // writer may then live on any one thread per rank (HDF5 itself is serialised by h5::lock()).
  Writer(const comm::Runtime& runtime, const std::string& path, const comm::OwnComm* comm = nullptr);
  ~Writer() override;  // closes if close() was not called (not collective when unwinding: handles dropped)
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Collective: every rank passes the same name and a tensor of the same shape and dtype (its
  // values are taken from each rank's own copy of its share of rows).
  void replicated(const std::string& name, const at::Tensor& tensor) override;
  // The same write from this rank's share of the rows only (share_rows() of the whole tensor, on any
  // device): what an asynchronous save keeps of a replicated tensor.
  void replicated_rows(const std::string& name, const std::vector<int64_t>& shape, at::ScalarType dtype,
                       const at::Tensor& rows);
  // Rows [first, last) of `tensor` (dimension 0; one row for a 0-dim tensor) that rank `rank` of
  // `world` writes of a replicated tensor, and those rows as a view.
  static std::pair<int64_t, int64_t> share(const at::Tensor& tensor, int rank, int world);
  static at::Tensor share_rows(const at::Tensor& tensor, int rank, int world);
  // Collective: a 1-D tensor of `total` elements that no rank holds whole (ZeRO's optimizer
  // shards). Rank r passes its elements [first, first + part.numel()); the ranges must be in rank
  // order and together cover [0, total) without overlap (a rank may pass an empty part). Every
  // range starts at a multiple of `block` (the checksum block, the same on every rank) and ends at
  // one or at `total`. A range that breaks these rules on any rank is a SystemError on every rank.
  void sharded(const std::string& name, int64_t total, int64_t first, const at::Tensor& part, int64_t block) override;
  // Collective: each rank passes its own tensor (any shape); stored as ranks/<r>/<name>.
  void per_rank(const std::string& name, const at::Tensor& mine) override;
  // Collective: root attributes, the same value on every rank (rank 0's is used).
  void attribute(const std::string& name, int64_t value) override;
  void attribute(const std::string& name, const std::string& value) override;
  // Collective: writes the checksum attributes and closes the file, fsyncs it, then writes its
  // whole-file checksum into the user block (seal_file, src/ckpt/seal.h); throws SystemError (same
  // on every rank) if any rank's write failed.
  void close();
  // After close(): the seconds this rank spent on the whole-file checksum.
  double seal_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Not collective: whether `path` is an HDF5 file with format = "meridian-checkpoint". A file that
// begins with a checkpoint's checksum header is verified first (DataError when it does not match).
bool is_checkpoint(const std::string& path);

class Reader {
 public:
  // Not collective. Verifies the file's whole-file checksum before HDF5 opens it (seal.h; a file
  // without one, from before checksums, is read unverified and said so; set_verify_checksums(false)
  // skips the check). DataError naming the file when it is not a readable checkpoint or its bytes
  // do not match their checksum.
  explicit Reader(const std::string& path);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& path() const;
  // Replicated tensor names (sorted), without ranks/.
  std::vector<std::string> names() const;
  bool has(const std::string& name) const;
  // The whole tensor, checked against its checksums (DataError naming file, dataset and block).
  at::Tensor read(const std::string& name) const;
  // Rows [first, first + count) of a tensor with at least one dimension; only the checksum
  // blocks that hold them are read and checked. DataError as read(), also for a range outside.
  at::Tensor read_rows(const std::string& name, int64_t first, int64_t count) const;
  int world_size_written() const;  // how many ranks/<r> groups there are
  std::optional<int64_t> int_attribute(const std::string& name) const;
  std::optional<std::string> string_attribute(const std::string& name) const;
  // Reads every dataset and checks every checksum; DataError on the first mismatch.
  void verify() const;
  int64_t bytes() const;  // size of all datasets
  // A dataset's shape without reading it (DataError if missing).
  std::vector<int64_t> shape(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meridian::ckpt

// A checkpoint as a training component sees it: named tensors and root attributes, written and
// read without knowing the file. train::Strategy saves its trained parameters and optimizer state
// through these (it owns that layout); ckpt implements them over its HDF5 file (ckpt::Writer, and a
// reader that loads replicated tensors in shares), so train knows no file format and ckpt knows no
// optimizer. Names are paths ("model/<parameter>", "optim/<parameter>/exp_avg").
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meridian::train {

class StateWriter {
 public:
  virtual ~StateWriter() = default;
  // Collective: every rank passes the same name and a tensor of the same shape and dtype (identical
  // values on every rank; each rank writes its share of the rows).
  virtual void replicated(const std::string& name, const at::Tensor& tensor) = 0;
  // Collective: a 1-D tensor of `total` elements that no rank holds whole (ZeRO's shards). Rank r
  // passes its elements [first, first + part.numel()); the ranges are in rank order, cover [0,
  // total) without overlap and start at multiples of `block` (ckpt::Writer::sharded).
  virtual void sharded(const std::string& name, int64_t total, int64_t first, const at::Tensor& part,
                       int64_t block) = 0;
  // Collective: each rank's own tensor (any shape), stored per rank.
  virtual void per_rank(const std::string& name, const at::Tensor& mine) = 0;
  // Collective: root attributes, the same value on every rank.
  virtual void attribute(const std::string& name, int64_t value) = 0;
  virtual void attribute(const std::string& name, const std::string& value) = 0;
};

class StateReader {
 public:
  virtual ~StateReader() = default;
  // The file, for messages.
  virtual const std::string& path() const = 0;
  // Not collective.
  virtual bool has(const std::string& name) const = 0;
  virtual std::vector<int64_t> shape(const std::string& name) const = 0;  // DataError if missing
  virtual at::Tensor read(const std::string& name) const = 0;             // whole, checksummed
  // Rows [first, first + count) of a tensor with at least one dimension.
  virtual at::Tensor read_rows(const std::string& name, int64_t first, int64_t count) const = 0;
  virtual std::optional<int64_t> int_attribute(const std::string& name) const = 0;
  virtual std::optional<std::string> string_attribute(const std::string& name) const = 0;
  // Collective (every rank, the same names in the same order): `target` (any device, in place)
  // filled with tensor `name`, read once between the ranks. DataError naming the file and the
  // tensor when it is missing or has another shape; a read error on any rank is an error on every
  // rank.
  virtual void load(const std::string& name, const at::Tensor& target) = 0;
};

}  // namespace meridian::train

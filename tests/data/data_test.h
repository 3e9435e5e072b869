// Shared by the data MPI tests (one executable): the scratch directory, created by rank 0 on first
// use, the same path on every rank (they run on one host), removed after the last test
// (tests/data/dataset_mpi_test.cpp); the message of the UserError a call throws; and the boxes of a
// row read without DatasetReader.
#pragma once

#include <functional>
#include <string>

#include "meridian/core/error.h"
#include "meridian/data/dataset_reader.h"

namespace meridian::test {

const std::string& shared_dir();

// The boxes of one row of a `detection` file, read the plain way: the file opened per call, no
// DatasetReader (tests/data/row_boxes.cpp). `info` from validate_dataset.
data::RowBoxes row_boxes(const data::DatasetInfo& info, int64_t row);

inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const meridian::UserError& e) {
    return e.what();
  }
  return "<no UserError>";
}

}  // namespace meridian::test

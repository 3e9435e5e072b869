// Shared by the data MPI tests (one executable): the scratch directory, created by rank 0 on first
// use, the same path on every rank (they run on one host), removed after the last test
// (tests/data/dataset_mpi_test.cpp); and the message of the UserError a call throws.
#pragma once

#include <functional>
#include <string>

#include "meridian/core/error.h"

namespace meridian::test {

const std::string& shared_dir();

inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const meridian::UserError& e) {
    return e.what();
  }
  return "<no UserError>";
}

}  // namespace meridian::test

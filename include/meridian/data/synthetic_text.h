// Synthetic instruction records (`meridian prep synthetic --kind text`): small learnable tasks
// (arithmetic, word reversal, counting letters) as Alpaca-style records, so that SFT can be
// exercised without downloading anything. No torch, no HDF5 (part of meridian_synthetic).
#pragma once

#include <cstdint>
#include <string>

namespace meridian::data {

// An instruction record as prep text reads it from JSONL: {"instruction", "input", "output"}.
struct SyntheticInstruction {
  std::string instruction, input, output;
};

// Record `index` of the dataset `seed`: a pure function of (seed, index), the same on every
// machine, thread and process (splitmix64, no global state).
SyntheticInstruction make_synthetic_instruction(uint64_t seed, int64_t index);

}  // namespace meridian::data

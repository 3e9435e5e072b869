// `meridian prep synthetic`: the procedurally drawn scenes of synthetic.h and the instruction
// records of synthetic_text.h written as datasets through data's prep_generated_* (the demo data
// and test fixture: no download). Part of meridian_synthetic, which uses data.
#pragma once

#include <cstdint>

#include "meridian/data/prep.h"

namespace meridian::data {

struct PrepSyntheticOptions : PrepCommon {
  int64_t count = 1000;
  uint64_t seed = 0;
};

// Collective, as data::prep_image_text: `count` scenes of dataset `seed` (rows named
// "synthetic/<seed>/<index>"), their captions and scene class (synthetic_scene_classes()).
// UserError on every rank for bad options (count < 1, size < 32 px).
PrepReport prep_synthetic_image_text(const comm::Runtime& runtime, const PrepSyntheticOptions& options);
// The same scenes' objects as boxes (synthetic_object_classes()).
PrepReport prep_synthetic_detection(const comm::Runtime& runtime, const PrepSyntheticOptions& options);
// Synthetic instruction records (arithmetic, word reversal, counting) with the Alpaca prompt:
// learnable, deterministic per seed.
PrepReport prep_synthetic_text(const comm::Runtime& runtime, const PrepSyntheticOptions& options);

}  // namespace meridian::data

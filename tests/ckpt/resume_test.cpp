// The elastic-resume batch rule: the checkpoint's global batch is kept on any world size.
#include <gtest/gtest.h>

#include "meridian/ckpt/checkpoint.h"

using meridian::ckpt::resume_batch;
using meridian::ckpt::ResumePoint;

TEST(ResumeBatch, KeepsTheGlobalBatchOnAnyWorldSize) {
  ResumePoint p;
  p.path = "step_00000010.h5";
  p.global_batch = 64;                       // e.g. 2 ranks x 32, or 4 x 8 x accumulate 2
  EXPECT_EQ(resume_batch(p, 2, 1, 32), 32);  // same shape: unchanged
  EXPECT_EQ(resume_batch(p, 4, 1, 32), 16);  // 2 -> 4 ranks
  EXPECT_EQ(resume_batch(p, 1, 1, 32), 64);  // 2 -> 1
  EXPECT_EQ(resume_batch(p, 4, 2, 32), 8);   // with accumulation
  EXPECT_EQ(resume_batch(p, 64, 1, 1), 1);
  try {
    resume_batch(p, 3, 1, 32);
    FAIL() << "64 does not divide into 3 ranks";
  } catch (const meridian::UserError& e) {
    EXPECT_STREQ(e.what(), "step_00000010.h5: its global batch 64 does not divide into 3 ranks x train.accumulate 1");
  }
  EXPECT_THROW(resume_batch(p, 2, 3, 32), meridian::UserError);  // 64 / 6
}

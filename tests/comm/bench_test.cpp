#include "meridian/comm/bench.h"

#include <gtest/gtest.h>

#include "meridian/core/error.h"

using meridian::comm::bus_factor;
using meridian::comm::CommBenchOptions;

TEST(CommBench, BusBandwidthFactorsMatchNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor("allreduce", 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor("allreduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor("allgather", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor("reduce_scatter", 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor("broadcast", 8), 1.0);
}

TEST(CommBench, ValidateRejectsBadOptions) {
  CommBenchOptions ok;
  EXPECT_NO_THROW(meridian::comm::validate(ok));
  auto bad = ok;
  bad.collectives = {"alltoall"};
  EXPECT_THROW(meridian::comm::validate(bad), meridian::UserError);
  bad = ok;
  bad.dtypes = {"float8"};
  EXPECT_THROW(meridian::comm::validate(bad), meridian::UserError);
  bad = ok;
  bad.op = meridian::comm::ReduceOp::Avg;
  bad.dtypes = {"int32"};
  EXPECT_THROW(meridian::comm::validate(bad), meridian::UserError);
  bad = ok;
  bad.min_bytes = 1024, bad.max_bytes = 8;
  EXPECT_THROW(meridian::comm::validate(bad), meridian::UserError);
  bad = ok;
  bad.factor = 1.0;
  EXPECT_THROW(meridian::comm::validate(bad), meridian::UserError);
}

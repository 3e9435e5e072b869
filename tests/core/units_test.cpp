// parse_bytes: binary suffixes (K, M, G and KiB, MiB, GiB) and decimal ones (KB, MB, GB, as
// transformers' max_shard_size "5GB"), and the errors naming the option.
#include "meridian/core/units.h"

#include <gtest/gtest.h>

#include "meridian/core/error.h"

namespace meridian {
namespace {

TEST(Units, BinaryAndDecimalSizes) {
  EXPECT_EQ(parse_bytes("8", "--size"), 8u);
  EXPECT_EQ(parse_bytes("64K", "--size"), 64u * 1024);
  EXPECT_EQ(parse_bytes("2MiB", "--size"), 2u * 1024 * 1024);
  EXPECT_EQ(parse_bytes("1G", "--size"), 1024ull * 1024 * 1024);
  EXPECT_EQ(parse_bytes("5GB", "--shard-size"), 5000000000ull);
  EXPECT_EQ(parse_bytes("20KB", "--shard-size"), 20000u);
  EXPECT_EQ(parse_bytes("1.5MB", "--shard-size"), 1500000u);
}

TEST(Units, BadSizesNameTheOption) {
  try {
    parse_bytes("5TB", "--shard-size");
    FAIL() << "5TB was taken";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--shard-size: '5TB' has an unknown unit (expected a size such as 8, 64K, 16M, 1G or 5GB)");
  }
  EXPECT_THROW(parse_bytes("0", "--size"), UserError);
  EXPECT_THROW(parse_bytes("GB", "--size"), UserError);
}

}  // namespace
}  // namespace meridian

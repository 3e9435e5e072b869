// data::holdout_count and data::holdout_indices: prep's --holdout N|F and --seed S.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "meridian/core/error.h"
#include "meridian/data/prep.h"

using meridian::UserError;
using meridian::data::check_holdout_value;
using meridian::data::holdout_count;
using meridian::data::holdout_indices;

namespace {

// The message of the UserError `f` throws ("" when it throws none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Holdout, CountIsExactOrRoundedFraction) {
  EXPECT_EQ(holdout_count("20", 200, "f"), 20);
  EXPECT_EQ(holdout_count("199", 200, "f"), 199);
  EXPECT_EQ(holdout_count("0.02", 52002, "f"), 1040);  // 1040.04
  EXPECT_EQ(holdout_count("0.1", 25, "f"), 3);         // 2.5: halves away from zero
  EXPECT_EQ(holdout_count("0.1", 24, "f"), 2);         // 2.4
  EXPECT_EQ(holdout_count("0.001", 10, "f"), 1);       // 0.01: at least one
  EXPECT_EQ(holdout_count("0.5", 2, "f"), 1);
}

TEST(Holdout, RefusesWhatLeavesNothingOrIsNoCount) {
  EXPECT_EQ(error_of([] { holdout_count("500", 200, "data.jsonl"); }),
            "--holdout 500: larger than the 200 records of data.jsonl");
  EXPECT_EQ(error_of([] { holdout_count("200", 200, "data.jsonl"); }),
            "--holdout 200: holds out 200 of the 200 records of data.jsonl, leaving none for --out");
  EXPECT_EQ(error_of([] { holdout_count("0.9", 1, "data.jsonl"); }),
            "--holdout 0.9: holds out 1 of the 1 records of data.jsonl, leaving none for --out");
  EXPECT_EQ(error_of([] { holdout_count("0.999", 200, "f"); }),
            "--holdout 0.999: holds out 200 of the 200 records of f, leaving none for --out");  // 199.8
  for (const char* bad :
       {"0", "-3", "1.0", "1.5", "0.0", "-0.5", "", "abc", "0.5x", "1e-1x", "nan", "inf", "99999999999999999999"})
    EXPECT_NE(error_of([&] { check_holdout_value(bad); }).find(std::string("--holdout: '") + bad + "' is neither"),
              std::string::npos)
        << bad;
  EXPECT_EQ(error_of([] { check_holdout_value("0.25"); }), "");
  EXPECT_EQ(error_of([] { check_holdout_value("7"); }), "");
}

TEST(Holdout, IndicesAreDeterministicSortedAndDisjointFromTheRest) {
  const auto a = holdout_indices(1000, 137, 5);
  EXPECT_EQ(a, holdout_indices(1000, 137, 5));  // every rank, every run
  ASSERT_EQ(a.size(), 137u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), a.size());  // no index twice
  EXPECT_GE(a.front(), 0);
  EXPECT_LT(a.back(), 1000);
  // The held-out ones and the rest are all records, each once.
  std::vector<int64_t> rest;
  for (int64_t i = 0; i < 1000; ++i)
    if (!std::binary_search(a.begin(), a.end(), i)) rest.push_back(i);
  EXPECT_EQ(rest.size() + a.size(), 1000u);
  EXPECT_NE(a, holdout_indices(1000, 137, 6));  // another seed, other records
  // Spread over the records, not a run at the start: about 137 / 2 in each half.
  const auto first_half = std::count_if(a.begin(), a.end(), [](int64_t i) { return i < 500; });
  EXPECT_GT(first_half, 40);
  EXPECT_LT(first_half, 97);
  // Fixed values (computed with splitmix64 in Python): the choice must not change between versions,
  // or a resumed project's validation set would.
  EXPECT_EQ(holdout_indices(10, 3, 0), (std::vector<int64_t>{1, 4, 5}));
  EXPECT_EQ(holdout_indices(20, 5, 42), (std::vector<int64_t>{0, 4, 7, 13, 16}));
  EXPECT_TRUE(holdout_indices(10, 0, 0).empty());
  EXPECT_EQ(holdout_indices(4, 4, 9), (std::vector<int64_t>{0, 1, 2, 3}));
}

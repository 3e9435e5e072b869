#include "meridian/core/error.h"

#include <gtest/gtest.h>

TEST(Error, WhereNamesRankAndHost) {
  meridian::set_process_identity(3, 8);
  const std::string w = meridian::where();
  EXPECT_EQ(w.rfind("[rank 3/8 @ ", 0), 0u) << w;
  EXPECT_NE(w.find(meridian::process_identity().host), std::string::npos);
  meridian::set_process_identity(-1, 0);
  EXPECT_EQ(meridian::where().rfind("[rank ? @ ", 0), 0u);
}

TEST(Error, CheckMacroCarriesLocationExpressionAndMessage) {
  meridian::set_process_identity(1, 2);
  try {
    const int free_slots = 0;
    MERIDIAN_CHECK(free_slots > 0, "queue is full");
    FAIL() << "no throw";
  } catch (const meridian::SystemError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[rank 1/2 @ "), std::string::npos) << m;
    EXPECT_NE(m.find("error_test.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("`free_slots > 0` failed: queue is full"), std::string::npos) << m;
  }
  meridian::set_process_identity(-1, 0);
}

TEST(Error, ConfigErrorNamesOriginAndField) {
  meridian::ConfigError e("run.yaml", "optim.lr", "expected a number");
  EXPECT_STREQ(e.what(), "run.yaml: field 'optim.lr': expected a number");
  EXPECT_EQ(e.field(), "optim.lr");
  const meridian::UserError& as_user = e;  // the CLI catches UserError
  EXPECT_EQ(std::string(as_user.what()), e.what());
}

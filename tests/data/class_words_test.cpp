// data::class_words: a class folder's name as the words of captions and prompts.
#include <gtest/gtest.h>

#include "meridian/data/format.h"

using meridian::data::class_words;

TEST(ClassWords, SnakeCamelAndCapitals) {
  EXPECT_EQ(class_words("airport"), "airport");                      // UCM
  EXPECT_EQ(class_words("dense_residential"), "dense residential");  // UCM, NWPU-RESISC45
  EXPECT_EQ(class_words("BareLand"), "bare land");                   // AID
  EXPECT_EQ(class_words("DenseResidential"), "dense residential");   // AID
  EXPECT_EQ(class_words("Airport"), "airport");
  EXPECT_EQ(class_words("baseball-field"), "baseball field");
  EXPECT_EQ(class_words("RSICD"), "RSICD");             // an acronym stays
  EXPECT_EQ(class_words("HTTPServer"), "HTTP server");  // the run of capitals ends before "Server"
  EXPECT_EQ(class_words("Road2Lane"), "road2 lane");
  EXPECT_EQ(class_words("__storage__tanks_"), "storage tanks");  // no empty words
  EXPECT_EQ(class_words("A"), "a");
  EXPECT_EQ(class_words(""), "");
}

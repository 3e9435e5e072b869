#include "meridian/data/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using meridian::data::make_synthetic_scene;
using meridian::data::synthetic_object_classes;
using meridian::data::synthetic_scene_classes;
using meridian::data::SyntheticScene;

namespace {

int scene_class(const std::string& name) {
  const auto& v = synthetic_scene_classes();
  return int(std::find(v.begin(), v.end(), name) - v.begin());
}

int object_class(const std::string& name) {
  const auto& v = synthetic_object_classes();
  return int(std::find(v.begin(), v.end(), name) - v.begin());
}

bool same_pixels(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && std::equal(a.datastart, a.dataend, b.datastart, b.dataend);
}

void expect_same(const SyntheticScene& a, const SyntheticScene& b, const std::string& what) {
  EXPECT_TRUE(same_pixels(a.image, b.image)) << what;
  EXPECT_EQ(a.label, b.label) << what;
  EXPECT_EQ(a.captions, b.captions) << what;
  EXPECT_EQ(a.boxes, b.boxes) << what;
  EXPECT_EQ(a.box_classes, b.box_classes) << what;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::vector<std::string> words(const std::string& sentence) {
  std::vector<std::string> out;
  std::string w;
  for (char ch : lower(sentence) + " ") {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      w += ch;
    } else if (!w.empty()) {
      out.push_back(w);
      w.clear();
    }
  }
  return out;
}

// How a caption writes a count: "no", "one".."twelve", then digits.
std::string count_word(int k) {
  static const char* const kWords[] = {"no",    "one",   "two",  "three", "four",   "five",  "six",
                                       "seven", "eight", "nine", "ten",   "eleven", "twelve"};
  return k <= 12 ? kWords[k] : std::to_string(k);
}

}  // namespace

TEST(Synthetic, ClassLists) {
  const auto& scenes = synthetic_scene_classes();
  const auto& objects = synthetic_object_classes();
  EXPECT_EQ(scenes.size(), 10u);
  EXPECT_EQ(objects.size(), 5u);
  EXPECT_EQ(std::set<std::string>(scenes.begin(), scenes.end()).size(), scenes.size());
  EXPECT_EQ(std::set<std::string>(objects.begin(), objects.end()).size(), objects.size());
  for (const char* name : {"farmland", "forest", "lake", "residential", "airport", "harbor", "highway", "storage_tanks",
                           "beach", "desert"})
    EXPECT_LT(scene_class(name), int(scenes.size())) << name;
  for (const char* name : {"plane", "ship", "building", "vehicle", "storage_tank"})
    EXPECT_LT(object_class(name), int(objects.size())) << name;
}

TEST(Synthetic, SameSeedAndIndexGiveIdenticalScenes) {
  for (int64_t i = 0; i < 20; ++i) {
    const auto a = make_synthetic_scene(42, i, 96, 4);
    const auto b = make_synthetic_scene(42, i, 96, 4);
    expect_same(a, b, "index " + std::to_string(i));
  }
}

// A rank that draws indices in another order, on other threads, must get the same scenes.
TEST(Synthetic, IndependentOfCallOrderAndThread) {
  constexpr int kCount = 24, kThreads = 3;
  std::vector<SyntheticScene> forward, threaded(kCount);
  for (int i = 0; i < kCount; ++i) forward.push_back(make_synthetic_scene(7, i, 64, 3));
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([t, &threaded] {
      for (int i = kCount - 1 - t; i >= 0; i -= kThreads) threaded[size_t(i)] = make_synthetic_scene(7, i, 64, 3);
    });
  for (auto& th : pool) th.join();
  for (int i = 0; i < kCount; ++i) expect_same(forward[size_t(i)], threaded[size_t(i)], "index " + std::to_string(i));
}

TEST(Synthetic, DifferentIndexOrSeedGivesDifferentImage) {
  const auto base = make_synthetic_scene(42, 0, 64, 1);
  EXPECT_FALSE(same_pixels(base.image, make_synthetic_scene(42, 1, 64, 1).image));
  EXPECT_FALSE(same_pixels(base.image, make_synthetic_scene(43, 0, 64, 1).image));
  EXPECT_FALSE(same_pixels(base.image, make_synthetic_scene(42, -1, 64, 1).image));
  std::set<std::vector<uchar>> distinct;
  for (int64_t i = 0; i < 30; ++i) {
    const cv::Mat img = make_synthetic_scene(42, i, 32, 1).image;
    distinct.insert(std::vector<uchar>(img.datastart, img.dataend));
  }
  EXPECT_EQ(distinct.size(), 30u);
}

// The number of captions asked for changes neither the drawing nor the first captions.
TEST(Synthetic, CaptionCountDoesNotChangeTheScene) {
  for (int64_t i = 0; i < 10; ++i) {
    const auto one = make_synthetic_scene(3, i, 64, 1);
    const auto many = make_synthetic_scene(3, i, 64, 8);
    EXPECT_TRUE(same_pixels(one.image, many.image));
    EXPECT_EQ(one.label, many.label);
    EXPECT_EQ(one.boxes, many.boxes);
    ASSERT_EQ(many.captions.size(), 8u);
    EXPECT_EQ(one.captions[0], many.captions[0]);
  }
}

TEST(Synthetic, ImageShapeAndType) {
  for (int size : {32, 97, 256}) {
    const auto s = make_synthetic_scene(1, 5, size, 2);
    EXPECT_EQ(s.image.rows, size);
    EXPECT_EQ(s.image.cols, size);
    EXPECT_EQ(s.image.type(), CV_8UC3);
    EXPECT_TRUE(s.image.isContinuous());
    EXPECT_GE(s.label, 0);
    EXPECT_LT(s.label, int(synthetic_scene_classes().size()));
  }
}

TEST(Synthetic, BoxesAreInsideTheImageAndNonDegenerate) {
  // Which scenes may hold which objects: a detector learns them from their context.
  const std::vector<std::pair<std::string, std::set<std::string>>> allowed = {
      {"plane", {"airport"}},
      {"ship", {"harbor"}},
      {"storage_tank", {"storage_tanks"}},
      {"vehicle", {"residential", "highway"}},
      {"building", {"farmland", "residential", "airport", "harbor"}}};
  int total = 0;
  for (int size : {32, 128}) {
    for (int64_t i = 0; i < 150; ++i) {
      const auto s = make_synthetic_scene(11, i, size, 1);
      ASSERT_EQ(s.boxes.size(), s.box_classes.size());
      for (size_t k = 0; k < s.boxes.size(); ++k) {
        const auto& b = s.boxes[k];
        const std::string where =
            "size " + std::to_string(size) + " index " + std::to_string(i) + " box " + std::to_string(k);
        EXPECT_GE(b[0], 0.f) << where;
        EXPECT_GE(b[1], 0.f) << where;
        EXPECT_LE(b[2], float(size)) << where;
        EXPECT_LE(b[3], float(size)) << where;
        EXPECT_GT(b[2], b[0]) << where;
        EXPECT_GT(b[3], b[1]) << where;
        const int cls = s.box_classes[k];
        ASSERT_GE(cls, 0) << where;
        ASSERT_LT(cls, int(synthetic_object_classes().size())) << where;
        const std::string& object = synthetic_object_classes()[size_t(cls)];
        const auto rule =
            std::find_if(allowed.begin(), allowed.end(), [&](const auto& a) { return a.first == object; });
        ASSERT_NE(rule, allowed.end()) << object;
        EXPECT_TRUE(rule->second.count(synthetic_scene_classes()[size_t(s.label)]))
            << where << ": " << synthetic_object_classes()[size_t(cls)] << " in "
            << synthetic_scene_classes()[size_t(s.label)];
        ++total;
      }
    }
  }
  EXPECT_GT(total, 300);
}

TEST(Synthetic, EverySceneAndObjectClassAppears) {
  std::vector<int> scenes(synthetic_scene_classes().size()), objects(synthetic_object_classes().size());
  for (int64_t i = 0; i < 200; ++i) {
    const auto s = make_synthetic_scene(0, i, 32, 1);
    ++scenes[size_t(s.label)];
    for (int c : s.box_classes) ++objects[size_t(c)];
  }
  for (size_t c = 0; c < scenes.size(); ++c) EXPECT_GE(scenes[c], 5) << synthetic_scene_classes()[c];
  for (size_t c = 0; c < objects.size(); ++c) EXPECT_GE(objects[c], 5) << synthetic_object_classes()[c];
}

// Every caption is a sentence that names the scene, and the K captions of a scene differ (each scene has at
// least six descriptions).
TEST(Synthetic, CaptionsAreDistinctSentencesThatNameTheScene) {
  const std::vector<std::vector<std::string>> keywords = {{"field", "farm"},
                                                          {"forest", "wood", "tree"},
                                                          {"lake", "water"},
                                                          {"house", "residential", "neighborhood", "home"},
                                                          {"airport", "runway", "plane", "airfield"},
                                                          {"harbor", "port", "pier", "ship"},
                                                          {"highway", "road", "lane"},
                                                          {"tank"},
                                                          {"beach", "sea", "sand"},
                                                          {"desert", "dune", "sand"}};
  ASSERT_EQ(keywords.size(), synthetic_scene_classes().size());
  for (int64_t i = 0; i < 200; ++i) {
    const auto s = make_synthetic_scene(5, i, 48, 6);
    ASSERT_EQ(s.captions.size(), 6u);
    EXPECT_EQ(std::set<std::string>(s.captions.begin(), s.captions.end()).size(), 6u) << "index " << i;
    for (const auto& c : s.captions) {
      ASSERT_GE(c.size(), 10u) << "index " << i;
      EXPECT_TRUE(std::isupper(static_cast<unsigned char>(c.front()))) << c;
      EXPECT_EQ(c.back(), '.') << c;
      EXPECT_EQ(c.find("  "), std::string::npos) << c;
      const std::string lc = lower(c);
      const auto& keys = keywords[size_t(s.label)];
      EXPECT_TRUE(std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return lc.find(k) != lc.npos; }))
          << synthetic_scene_classes()[size_t(s.label)] << ": " << c;
    }
  }
}

// The counts in the captions are the counts of the boxes.
TEST(Synthetic, CaptionCountsMatchTheBoxes) {
  const std::vector<std::array<std::string, 3>> checks = {{"airport", "plane", "plane"},
                                                          {"harbor", "ship", "ship"},
                                                          {"highway", "vehicle", "vehicle"},
                                                          {"storage_tanks", "storage_tank", "tank"},
                                                          {"residential", "building", "house"}};
  int checked = 0;
  for (int64_t i = 0; i < 150; ++i) {
    const auto s = make_synthetic_scene(9, i, 96, 20);
    for (const auto& [scene, object, noun] : checks) {
      if (s.label != scene_class(scene)) continue;
      const int k = int(std::count(s.box_classes.begin(), s.box_classes.end(), object_class(object)));
      const bool found = std::any_of(s.captions.begin(), s.captions.end(), [&](const std::string& c) {
        const auto w = words(c);
        return std::find(w.begin(), w.end(), count_word(k)) != w.end() && lower(c).find(noun) != std::string::npos;
      });
      std::ostringstream all;
      for (const auto& c : s.captions) all << "\n  " << c;
      EXPECT_TRUE(found) << scene << " index " << i << " has " << k << " " << object << " boxes:" << all.str();
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

// The class is visible in the pixels: water is blue, and a nearest-centroid classifier on colour statistics
// alone is far above chance (10%).
TEST(Synthetic, PixelStatisticsDependOnTheClass) {
  const size_t classes = synthetic_scene_classes().size();
  auto features = [](const cv::Mat& img) {
    cv::Scalar mean, stddev;
    cv::meanStdDev(img, mean, stddev);
    return std::array<double, 6>{mean[0], mean[1], mean[2], stddev[0], stddev[1], stddev[2]};
  };
  std::vector<std::array<double, 6>> centroid(classes, std::array<double, 6>{});
  std::vector<int> seen(classes, 0);
  for (int64_t i = 0; i < 300; ++i) {
    const auto s = make_synthetic_scene(21, i, 64, 1);
    const auto f = features(s.image);
    for (size_t d = 0; d < f.size(); ++d) centroid[size_t(s.label)][d] += f[d];
    ++seen[size_t(s.label)];
  }
  for (size_t c = 0; c < classes; ++c) {
    ASSERT_GT(seen[c], 0) << synthetic_scene_classes()[c];
    for (double& v : centroid[c]) v /= seen[c];
  }
  const size_t lake = size_t(scene_class("lake")), farmland = size_t(scene_class("farmland"));
  const size_t forest = size_t(scene_class("forest")), desert = size_t(scene_class("desert"));
  EXPECT_GT(centroid[lake][2], centroid[farmland][2] + 30);  // mean blue
  EXPECT_GT(centroid[lake][2], centroid[lake][0] + 30);      // lakes are bluer than red
  EXPECT_LT(centroid[forest][0] + centroid[forest][1] + centroid[forest][2],
            centroid[desert][0] + centroid[desert][1] + centroid[desert][2] - 150);  // forests are dark
  int correct = 0, total = 0;
  for (int64_t i = 300; i < 500; ++i) {
    const auto s = make_synthetic_scene(21, i, 64, 1);
    const auto f = features(s.image);
    size_t best = 0;
    double best_d = 1e300;
    for (size_t c = 0; c < classes; ++c) {
      double d = 0;
      for (size_t k = 0; k < f.size(); ++k) d += (f[k] - centroid[c][k]) * (f[k] - centroid[c][k]);
      if (d < best_d) best_d = d, best = c;
    }
    correct += best == size_t(s.label);
    ++total;
  }
  EXPECT_GT(double(correct) / total, 0.6) << correct << " of " << total;
}

TEST(Synthetic, InvalidArgumentsThrow) {
  EXPECT_THROW(make_synthetic_scene(0, 0, 31, 1), std::invalid_argument);
  EXPECT_THROW(make_synthetic_scene(0, 0, 0, 1), std::invalid_argument);
  EXPECT_THROW(make_synthetic_scene(0, 0, -256, 1), std::invalid_argument);
  EXPECT_THROW(make_synthetic_scene(0, 0, 64, 0), std::invalid_argument);
  EXPECT_THROW(make_synthetic_scene(0, 0, 64, -3), std::invalid_argument);
  EXPECT_NO_THROW(make_synthetic_scene(0, 0, 32, 1));
}

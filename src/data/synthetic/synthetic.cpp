#include "meridian/data/synthetic.h"

#include <cstddef>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "meridian/core/hash.h"
#include "scenes.h"

namespace meridian::data {
namespace {

struct SceneKind {
  const char* name;  // the class name, synthetic_scene_classes()[label]
  synthetic::Captions (*draw)(synthetic::Ctx&);
};

// The scene kinds in label order, which is part of the dataset format: append, never reorder. One row per kind.
// clang-format off
constexpr SceneKind kSceneKinds[] = {
    {"farmland", synthetic::farmland},
    {"forest", synthetic::forest},
    {"lake", synthetic::lake},
    {"residential", synthetic::residential},
    {"airport", synthetic::airport},
    {"harbor", synthetic::harbor},
    {"highway", synthetic::highway},
    {"storage_tanks", synthetic::storage},
    {"beach", synthetic::beach},
    {"desert", synthetic::desert},
};
// clang-format on

}  // namespace

const std::vector<std::string>& synthetic_scene_classes() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const SceneKind& kind : kSceneKinds) names.emplace_back(kind.name);
    return names;
  }();
  return kNames;
}

const std::vector<std::string>& synthetic_object_classes() {
  // Indexed by synthetic::ObjectClass.
  static const std::vector<std::string> kNames = {"plane", "ship", "building", "vehicle", "storage_tank"};
  return kNames;
}

SyntheticScene make_synthetic_scene(uint64_t seed, int64_t index, int size, int captions) {
  if (size < 32)
    throw std::invalid_argument("make_synthetic_scene: size must be at least 32, got " + std::to_string(size));
  if (captions < 1)
    throw std::invalid_argument("make_synthetic_scene: captions must be at least 1, got " + std::to_string(captions));
  const uint64_t h = splitmix64(splitmix64(seed) ^ uint64_t(index));
  SyntheticScene scene;
  scene.label = int(h % std::size(kSceneKinds));
  synthetic::Ctx c(size, splitmix64(h), scene);
  synthetic::Captions caps = kSceneKinds[scene.label].draw(c);
  synthetic::grain(c, 2);
  // Distinct candidates in a per-scene random order; caption i is the same for every K > i.
  caps = synthetic::unique_in_order(caps);
  for (size_t i = caps.size(); i > 1; --i) std::swap(caps[i - 1], caps[size_t(c.rng.randint(0, int(i) - 1))]);
  for (int i = 0; i < captions; ++i) scene.captions.push_back(synthetic::sentence(caps[size_t(i) % caps.size()]));
  return scene;
}

}  // namespace meridian::data

// Procedurally drawn aerial-like scenes: the embedded demo dataset and test fixture (`meridian prep synthetic`),
// so that training, detection and captioning can be exercised without downloading anything.
//
// Every scene is a pure function of (seed, index, size): which process or thread draws which index does not
// matter, so ranks can generate disjoint index ranges and still agree on the dataset. The content is learnable:
// each scene class has its own colours, textures and structures, boxes are the exact bounds of the drawn
// objects, and the captions are generated from what was drawn (counts, colours, positions, orientations).
#pragma once

#include <array>
#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

namespace meridian::data {

struct SyntheticScene {
  cv::Mat image;                            // [size, size] CV_8UC3, RGB channel order, continuous, owned
  int label = 0;                            // scene class, index into synthetic_scene_classes()
  std::vector<std::string> captions;        // exactly `captions` sentences (sentence case, ending with '.')
  std::vector<std::array<float, 4>> boxes;  // [N] x_min, y_min, x_max, y_max in pixels (see below)
  std::vector<int> box_classes;             // [N] index into synthetic_object_classes(), one per box
};

// Scene classes, in label order: farmland, forest, lake, residential, airport, harbor, highway, storage_tanks,
// beach, desert. The order is part of the dataset format: append, never reorder.
const std::vector<std::string>& synthetic_scene_classes();

// Object classes, in box-class order: plane, ship, building, vehicle, storage_tank. Append, never reorder.
const std::vector<std::string>& synthetic_object_classes();

// Draws scene `index` of the dataset `seed`.
//
// Deterministic in (seed, index, size): the same pixels, captions and boxes on every call, thread and process
// of the same build (bit-identical across machines as long as libm and OpenCV are the same versions). The label
// depends on (seed, index) only, and is uniform over the scene classes. `captions` does not change the image:
// the captions for K are the first K of those for any larger K. The K captions differ from each other when the
// scene has K distinct descriptions (every scene has at least 6); beyond that they repeat.
//
// Boxes use pixel-edge coordinates: pixel (col, row) covers [col, col+1) x [row, row+1), so a box is the
// tightest rectangle around the object's drawn pixels, x_max = last column + 1, clipped to [0, size]. Objects
// are drawn without overlapping each other; an object less than half inside the image is not drawn at all.
//
// Pure function: no global state (OpenCV's global theRNG() is not used), safe to call from any thread.
// Throws std::invalid_argument for size < 32 or captions < 1.
SyntheticScene make_synthetic_scene(uint64_t seed, int64_t index, int size, int captions);

}  // namespace meridian::data

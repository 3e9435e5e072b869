// The drawing kit of the synthetic scenes (private to meridian_synthetic): a portable random source, geometry in
// pixel-edge coordinates rasterised in fixed point, fills and bands, shore-like layouts along an image side, objects
// drawn through a label mask so that their boxes are exact (place()), the object builders, and texture.
//
// Everything is deterministic in its arguments and in the state of the Rng / Ctx it is given: no global state
// (OpenCV's theRNG() is never used), so scenes can be drawn on any thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <opencv2/core.hpp>
#include <random>
#include <utility>
#include <vector>

#include "meridian/data/synthetic.h"

namespace meridian::data::synthetic {

constexpr double kPi = 3.14159265358979323846;

// Box classes, in the order of synthetic_object_classes().
enum ObjectClass { kPlane, kShip, kBuilding, kVehicle, kStorageTank };

// std::mt19937_64's output is fixed by the standard; the std::*_distribution classes are not (libstdc++ and
// libc++ differ), so every draw goes through this arithmetic.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t next() { return engine_(); }
  double uniform() { return double(engine_() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int randint(int lo, int hi) { return lo + int(uniform() * double(hi - lo + 1)); }  // [lo, hi]
  bool chance(double p) { return uniform() < p; }

 private:
  std::mt19937_64 engine_;
};

// ---------------------------------------------------------------------------------------------------------------
// Geometry and drawing. Coordinates are doubles in pixel-edge units (pixel c covers [c, c+1)); polygons are drawn
// with kShift fractional bits so that small objects keep their shape.

using P = cv::Point2d;
constexpr int kShift = 3;
constexpr double kOne = 8.0;  // 1 << kShift

// `p` relative to `origin` in OpenCV's fixed-point pixel-centre coordinates (for drawing calls with kShift).
cv::Point fixed_point(P p, P origin);

// Maps an object's own coordinates (x forward, y sideways) to the image.
struct Frame {
  Frame(P center, double angle) : c(center), cs(std::cos(angle)), sn(std::sin(angle)) {}
  P operator()(double x, double y) const { return {c.x + cs * x - sn * y, c.y + sn * x + cs * y}; }
  P c;
  double cs, sn;
};

// The rectangle [x0, x1] x [y0, y1] of frame `f`, as 4 image points.
std::vector<P> rect_pts(const Frame& f, double x0, double y0, double x1, double y1);

// Colours are RGB scalars (the images are RGB).
inline cv::Scalar rgb(double r, double g, double b) { return cv::Scalar(r, g, b); }
cv::Scalar shade(const cv::Scalar& c, double f);             // each channel times f, capped at 255
cv::Scalar jitter(Rng& r, const cv::Scalar& c, double amp);  // each channel +- amp, clamped to [0, 255]

// Antialiased fills into `img`: a convex polygon, any polygon, a disc.
void fill_convex(cv::Mat& img, const std::vector<P>& pts, const cv::Scalar& color);
void fill_poly(cv::Mat& img, const std::vector<P>& pts, const cv::Scalar& color);
void disc(cv::Mat& img, P c, double r, const cv::Scalar& color);

// A straight band of the given width from a to b (a road, a marking, a pipe); nothing when a == b.
void band(cv::Mat& img, P a, P b, double width, const cv::Scalar& color);

// An open antialiased polyline, `width` rounded to whole pixels (at least 1).
void polyline(cv::Mat& img, const std::vector<P>& pts, const cv::Scalar& color, double width);

// Sides of the image: 0 left, 1 right, 2 top, 3 bottom. Shore-like layouts are built in a canonical frame where
// u runs along the side and v is the distance from it; from_side maps (u, v) to the image of size n.
P from_side(int side, double n, double u, double v);
const char* side_name(int side);  // "left", "right", "top", "bottom"

// A wavy line v(u) for shores and dunes.
struct Wave {
  double base, a1, f1, p1, a2, f2, p2;
  double operator()(double u) const { return base + a1 * std::sin(f1 * u + p1) + a2 * std::sin(f2 * u + p2); }
};

// A wave around `base` with amplitude up to about `amp`, wavelengths a fraction of the image size n.
Wave make_wave(Rng& r, double n, double base, double amp);

// The region between `side` and the wave (shifted by `extra`), or beyond the wave when `far`, as a polygon
// reaching 2 pixels past the image.
std::vector<P> side_region(int side, double n, const Wave& w, double extra, bool far = false);

// The wave (shifted by `extra`) as an open line across the image.
std::vector<P> wave_line(int side, double n, const Wave& w, double extra);

// ---------------------------------------------------------------------------------------------------------------
// Objects: a list of filled convex polygons and discs, drawn through a label mask so that the box is computed from
// exactly the pixels that were painted.

struct Shape {
  std::vector<P> poly;  // convex; empty for a disc
  P center;
  double radius = 0;
  cv::Scalar color;
};

struct Object {
  int cls = 0;  // ObjectClass
  std::vector<Shape> shapes;
  void poly(std::vector<P> pts, const cv::Scalar& color) { shapes.push_back({std::move(pts), {}, 0, color}); }
  void disc(P c, double r, const cv::Scalar& color) { shapes.push_back({{}, c, r, color}); }
  template <class F>
  void map(const F& f) {
    for (auto& s : shapes) {
      for (auto& p : s.poly) p = f(p);
      s.center = f(s.center);
    }
  }
};

struct Extent {
  double x0, y0, x1, y1;
};

// A colour with the name captions use for it.
struct Named {
  const char* name;
  cv::Scalar color;
};

// The state of one scene being drawn: its size, random sources, the output scene (image, boxes) and the extents
// of the objects placed so far.
struct Ctx {
  Ctx(int size, uint64_t seed, SyntheticScene& scene)
      : n(size), s(size / 256.0), rng(seed), cvr(rng.next()), out(scene) {
    out.image.create(n, n, CV_8UC3);
    img = out.image;
  }
  double px(double v, double lo = 1.0) const { return std::max(v * s, lo); }  // a 256-pixel length, scaled
  // Draws that need several numbers are made in braced lists or separate statements: the order in which function
  // arguments are evaluated is unspecified (GCC and Clang differ), and it would change the scene.
  P point(double margin = 0) { return {rng.uniform(margin, n - margin), rng.uniform(margin, n - margin)}; }
  P point(double x0, double x1, double y0, double y1) { return {rng.uniform(x0, x1), rng.uniform(y0, y1)}; }
  P offset(double amp) { return {rng.uniform(-amp, amp), rng.uniform(-amp, amp)}; }
  const Named& pick(const std::vector<Named>& v) { return v[size_t(rng.randint(0, int(v.size()) - 1))]; }
  int count(int cls) const { return int(std::count(out.box_classes.begin(), out.box_classes.end(), cls)); }

  int n;
  double s;
  Rng rng;
  cv::RNG cvr;  // OpenCV's fills (texture, grain), seeded from rng
  SyntheticScene& out;
  cv::Mat img;  // out.image
  std::vector<Extent> occupied;
};

// Draws `obj` unless it would come within `margin` of an object already drawn or less than `min_visible` of its
// pixels fall inside the image; returns whether it was drawn (and its box and class appended to c.out).
// Rasterised pixels reach up to half a pixel beyond the geometry, so a margin of 2 (the least used) keeps at least
// one background pixel between any two objects.
bool place(Ctx& c, const Object& obj, double margin, double min_visible = 0.5);

// Object builders, in image coordinates: `center`, heading `angle` (radians, y down), sizes in pixels.
Object house(P center, double angle, double len, double wid, const cv::Scalar& color);          // gable roof
Object flat_building(P center, double angle, double len, double wid, const cv::Scalar& color);  // terminal, shed
Object plane(P center, double angle, double len, const cv::Scalar& color);
Object ship(P center, double angle, double len, double beam, const cv::Scalar& hull, Rng& r);  // r: deck cargo
Object car(P center, double angle, double len, double wid, const cv::Scalar& color);
Object truck(P center, double angle, double len, double wid, const cv::Scalar& cab, const cv::Scalar& trailer);
Object tank(P center, double r, const cv::Scalar& color);  // a storage tank seen from above

// ---------------------------------------------------------------------------------------------------------------
// Texture, from c.cvr.

// Adds smooth luminance variation (`cells` x `cells` blobs of +-amp across the image) and, when grain > 0, per-pixel
// grain in [-grain, grain). grain must be a power of two.
void texture(Ctx& c, int cells, double amp, int grain);

// Adds per-pixel grain in [-amp, amp); amp must be a power of two.
void grain(Ctx& c, int amp);

}  // namespace meridian::data::synthetic

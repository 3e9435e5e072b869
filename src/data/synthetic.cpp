#include "meridian/data/synthetic.h"

#include "meridian/core/hash.h"

#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>
#include <random>
#include <stdexcept>

namespace meridian::data {
namespace {

constexpr double kPi = 3.14159265358979323846;

enum SceneClass { kFarmland, kForest, kLake, kResidential, kAirport, kHarbor, kHighway, kStorage, kBeach, kDesert };
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
// with 3 fractional bits so that small objects keep their shape.

using P = cv::Point2d;
constexpr int kShift = 3;
constexpr double kOne = 8.0;

cv::Point fixed_point(P p, P origin) {
  return {int(std::lround((p.x - origin.x - 0.5) * kOne)), int(std::lround((p.y - origin.y - 0.5) * kOne))};
}

std::vector<cv::Point> fixed_points(const std::vector<P>& pts, P origin = {0, 0}) {
  std::vector<cv::Point> out;
  out.reserve(pts.size());
  for (const P& p : pts) out.push_back(fixed_point(p, origin));
  return out;
}

// Maps an object's own coordinates (x forward, y sideways) to the image.
struct Frame {
  Frame(P center, double angle) : c(center), cs(std::cos(angle)), sn(std::sin(angle)) {}
  P operator()(double x, double y) const { return {c.x + cs * x - sn * y, c.y + sn * x + cs * y}; }
  P c;
  double cs, sn;
};

std::vector<P> rect_pts(const Frame& f, double x0, double y0, double x1, double y1) {
  return {f(x0, y0), f(x1, y0), f(x1, y1), f(x0, y1)};
}

cv::Scalar rgb(double r, double g, double b) { return cv::Scalar(r, g, b); }

cv::Scalar shade(const cv::Scalar& c, double f) {
  return cv::Scalar(std::min(255.0, c[0] * f), std::min(255.0, c[1] * f), std::min(255.0, c[2] * f));
}

cv::Scalar jitter(Rng& r, const cv::Scalar& c, double amp) {
  cv::Scalar out;
  for (int i = 0; i < 3; ++i) out[i] = std::clamp(c[i] + r.uniform(-amp, amp), 0.0, 255.0);
  return out;
}

void fill_convex(cv::Mat& img, const std::vector<P>& pts, const cv::Scalar& color) {
  cv::fillConvexPoly(img, fixed_points(pts), color, cv::LINE_AA, kShift);
}

void fill_poly(cv::Mat& img, const std::vector<P>& pts, const cv::Scalar& color) {
  const std::vector<std::vector<cv::Point>> polys{fixed_points(pts)};
  cv::fillPoly(img, polys, color, cv::LINE_AA, kShift);
}

void disc(cv::Mat& img, P c, double r, const cv::Scalar& color) {
  cv::circle(img, fixed_point(c, {0, 0}), int(std::lround(r * kOne)), color, cv::FILLED, cv::LINE_AA, kShift);
}

// A straight band of the given width from a to b (a road, a marking, a pipe).
void band(cv::Mat& img, P a, P b, double width, const cv::Scalar& color) {
  const double len = std::hypot(b.x - a.x, b.y - a.y);
  if (len <= 0) return;
  const P n(-(b.y - a.y) / len * width / 2, (b.x - a.x) / len * width / 2);
  fill_convex(img, {a + n, b + n, b - n, a - n}, color);
}

void polyline(cv::Mat& img, const std::vector<P>& pts, const cv::Scalar& color, double width) {
  const std::vector<std::vector<cv::Point>> lines{fixed_points(pts)};
  cv::polylines(img, lines, false, color, std::max(1, int(std::lround(width))), cv::LINE_AA, kShift);
}

// Sides of the image: 0 left, 1 right, 2 top, 3 bottom. Shore-like layouts are built in a canonical frame where
// u runs along the side and v is the distance from it, then mapped.
P from_side(int side, double n, double u, double v) {
  switch (side) {
    case 0:
      return {v, u};
    case 1:
      return {n - v, u};
    case 2:
      return {u, v};
    default:
      return {u, n - v};
  }
}

const char* side_name(int side) {
  static const char* const kNames[] = {"left", "right", "top", "bottom"};
  return kNames[side];
}

// A wavy line v(u) for shores and dunes.
struct Wave {
  double base, a1, f1, p1, a2, f2, p2;
  double operator()(double u) const { return base + a1 * std::sin(f1 * u + p1) + a2 * std::sin(f2 * u + p2); }
};

Wave make_wave(Rng& r, double n, double base, double amp) {
  const double k = 2 * kPi / n;
  return {base,
          amp * r.uniform(0.4, 1.0),
          k * r.uniform(0.5, 1.5),
          r.uniform(0, 2 * kPi),
          amp * r.uniform(0.1, 0.35),
          k * r.uniform(2.0, 5.0),
          r.uniform(0, 2 * kPi)};
}

// The region between `side` and the wave (shifted by `extra`), or beyond the wave when `far`.
std::vector<P> side_region(int side, double n, const Wave& w, double extra, bool far = false) {
  constexpr int kSteps = 40;
  std::vector<P> pts;
  pts.reserve(kSteps + 3);
  const double edge = far ? n + 2 : -2;
  pts.push_back(from_side(side, n, -2, edge));
  for (int i = 0; i <= kSteps; ++i) {
    const double u = -2 + (n + 4) * i / kSteps;
    pts.push_back(from_side(side, n, u, w(u) + extra));
  }
  pts.push_back(from_side(side, n, n + 2, edge));
  return pts;
}

std::vector<P> wave_line(int side, double n, const Wave& w, double extra) {
  constexpr int kSteps = 40;
  std::vector<P> pts;
  for (int i = 0; i <= kSteps; ++i) {
    const double u = -2 + (n + 4) * i / kSteps;
    pts.push_back(from_side(side, n, u, w(u) + extra));
  }
  return pts;
}

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
  int cls = 0;
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

struct Named {
  const char* name;
  cv::Scalar color;
};

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
  cv::RNG cvr;
  SyntheticScene& out;
  cv::Mat img;
  std::vector<Extent> occupied;
};

// Draws `obj` unless it would come within `margin` of an object already drawn or less than `min_visible` of its
// pixels fall inside the image; returns whether it was drawn (and boxed). Rasterised pixels reach up to half a
// pixel beyond the geometry, so a margin of 2 keeps at least one background pixel between any two objects.
bool place(Ctx& c, const Object& obj, double margin, double min_visible = 0.5) {
  margin = std::max(margin, 2.0);
  Extent e{1e300, 1e300, -1e300, -1e300};
  for (const Shape& sh : obj.shapes) {
    for (const P& p : sh.poly) e = {std::min(e.x0, p.x), std::min(e.y0, p.y), std::max(e.x1, p.x), std::max(e.y1, p.y)};
    if (sh.radius > 0)
      e = {std::min(e.x0, sh.center.x - sh.radius), std::min(e.y0, sh.center.y - sh.radius),
           std::max(e.x1, sh.center.x + sh.radius), std::max(e.y1, sh.center.y + sh.radius)};
  }
  if (!(e.x1 > e.x0 && e.y1 > e.y0) || e.x1 - e.x0 > 4.0 * c.n || e.y1 - e.y0 > 4.0 * c.n) return false;
  for (const Extent& o : c.occupied)
    if (e.x0 - margin < o.x1 && o.x0 < e.x1 + margin && e.y0 - margin < o.y1 && o.y0 < e.y1 + margin) return false;
  const cv::Rect full(int(std::floor(e.x0)) - 2, int(std::floor(e.y0)) - 2, int(std::ceil(e.x1 - e.x0)) + 5,
                      int(std::ceil(e.y1 - e.y0)) + 5);
  const cv::Rect vis = full & cv::Rect(0, 0, c.n, c.n);
  if (vis.empty()) return false;
  cv::Mat label = cv::Mat::zeros(full.size(), CV_8U);
  const P origin(full.x, full.y);
  for (size_t k = 0; k < obj.shapes.size(); ++k) {
    const Shape& sh = obj.shapes[k];
    const cv::Scalar value(double(k + 1));
    if (sh.radius > 0)
      cv::circle(label, fixed_point(sh.center, origin), int(std::lround(sh.radius * kOne)), value, cv::FILLED,
                 cv::LINE_8, kShift);
    else
      cv::fillConvexPoly(label, fixed_points(sh.poly, origin), value, cv::LINE_8, kShift);
  }
  const cv::Mat shown = label(vis - full.tl());
  const int total = cv::countNonZero(label), inside = cv::countNonZero(shown);
  if (inside == 0 || inside < min_visible * total) return false;
  const cv::Rect bb = cv::boundingRect(shown);
  cv::Mat dst = c.img(vis);
  for (size_t k = 0; k < obj.shapes.size(); ++k) dst.setTo(obj.shapes[k].color, shown == int(k + 1));
  c.out.boxes.push_back(
      {float(vis.x + bb.x), float(vis.y + bb.y), float(vis.x + bb.x + bb.width), float(vis.y + bb.y + bb.height)});
  c.out.box_classes.push_back(obj.cls);
  c.occupied.push_back(e);
  return true;
}

Object house(P center, double angle, double len, double wid, const cv::Scalar& color) {
  const Frame f(center, angle);
  Object o{kBuilding, {}};
  o.poly(rect_pts(f, -len / 2, -wid / 2, len / 2, 0), color);  // gable roof: two halves lit differently
  o.poly(rect_pts(f, -len / 2, 0, len / 2, wid / 2), shade(color, 0.78));
  return o;
}

Object flat_building(P center, double angle, double len, double wid, const cv::Scalar& color) {
  const Frame f(center, angle);
  Object o{kBuilding, {}};
  o.poly(rect_pts(f, -len / 2, -wid / 2, len / 2, wid / 2), color);
  o.poly(rect_pts(f, -len / 2 + wid * 0.15, -wid * 0.06, len / 2 - wid * 0.15, wid * 0.06), shade(color, 0.8));
  return o;
}

Object plane(P center, double angle, double len, const cv::Scalar& color) {
  const Frame f(center, angle);
  const double L = len;
  Object o{kPlane, {}};
  o.poly({f(0.5 * L, 0), f(0.42 * L, 0.05 * L), f(-0.45 * L, 0.05 * L), f(-0.5 * L, 0.02 * L), f(-0.5 * L, -0.02 * L),
          f(-0.45 * L, -0.05 * L), f(0.42 * L, -0.05 * L)},
         color);
  for (double side : {1.0, -1.0}) {
    o.poly({f(0.1 * L, side * 0.04 * L), f(-0.12 * L, side * 0.5 * L), f(-0.21 * L, side * 0.5 * L),
            f(-0.08 * L, side * 0.04 * L)},
           shade(color, 0.93));
    o.poly({f(-0.34 * L, side * 0.04 * L), f(-0.45 * L, side * 0.18 * L), f(-0.5 * L, side * 0.18 * L),
            f(-0.44 * L, side * 0.04 * L)},
           shade(color, 0.93));
  }
  if (len >= 24) o.poly(rect_pts(f, 0.36 * L, -0.03 * L, 0.43 * L, 0.03 * L), rgb(60, 70, 90));
  return o;
}

Object ship(P center, double angle, double len, double beam, const cv::Scalar& hull, Rng& r) {
  const Frame f(center, angle);
  const double L = len, B = beam;
  Object o{kShip, {}};
  o.poly({f(-0.5 * L, -0.5 * B), f(0.3 * L, -0.5 * B), f(0.5 * L, 0), f(0.3 * L, 0.5 * B), f(-0.5 * L, 0.5 * B)}, hull);
  const bool white_hull = hull[0] > 200;
  o.poly(rect_pts(f, -0.44 * L, -0.32 * B, -0.2 * L, 0.32 * B), white_hull ? rgb(90, 92, 100) : rgb(235, 235, 230));
  if (r.chance(0.5)) {  // deck cargo
    static const cv::Scalar kCargo[] = {rgb(180, 60, 40), rgb(40, 90, 160), rgb(200, 160, 50), rgb(60, 130, 80)};
    const int blocks = r.randint(2, 4);
    for (int i = 0; i < blocks; ++i) {
      const double x0 = -0.15 * L + i * 0.4 * L / blocks;
      o.poly(rect_pts(f, x0, -0.3 * B, x0 + 0.34 * L / blocks, 0.3 * B), kCargo[r.randint(0, 3)]);
    }
  }
  return o;
}

Object car(P center, double angle, double len, double wid, const cv::Scalar& color) {
  const Frame f(center, angle);
  Object o{kVehicle, {}};
  o.poly(rect_pts(f, -len / 2, -wid / 2, len / 2, wid / 2), color);
  o.poly(rect_pts(f, 0.08 * len, -0.4 * wid, 0.26 * len, 0.4 * wid), rgb(40, 45, 55));
  o.poly(rect_pts(f, -0.38 * len, -0.38 * wid, -0.27 * len, 0.38 * wid), rgb(40, 45, 55));
  return o;
}

Object truck(P center, double angle, double len, double wid, const cv::Scalar& cab, const cv::Scalar& trailer) {
  const Frame f(center, angle);
  Object o{kVehicle, {}};
  o.poly(rect_pts(f, -len / 2, -wid / 2, 0.28 * len, wid / 2), trailer);
  o.poly(rect_pts(f, 0.31 * len, -wid * 0.45, len / 2, wid * 0.45), cab);
  return o;
}

Object tank(P center, double r, const cv::Scalar& color) {
  Object o{kStorageTank, {}};
  o.disc(center, r, color);
  o.disc(center, 0.82 * r, shade(color, 0.92));
  o.disc(center + P(0.25 * r, -0.2 * r), std::max(0.6, 0.12 * r), shade(color, 0.7));
  return o;
}

// ---------------------------------------------------------------------------------------------------------------
// Texture.

// Per-pixel grain in [-amp, amp). amp must be a power of two: OpenCV then fills from raw random bits, about three
// times faster than for other ranges.
cv::Mat grain_noise(Ctx& c, int amp) {
  cv::Mat g(c.img.size(), CV_16SC3);
  c.cvr.fill(g, cv::RNG::UNIFORM, cv::Scalar::all(-amp), cv::Scalar::all(amp));
  return g;
}

// Adds smooth luminance variation (`cells` blobs across the image) and grain, both drawn from the scene's own
// cv::RNG (cv::randu would use the thread's global theRNG() and break determinism).
void texture(Ctx& c, int cells, double amp, int grain) {
  cv::Mat low(cells, cells, CV_16S), up, noise;
  c.cvr.fill(low, cv::RNG::UNIFORM, cv::Scalar(-amp), cv::Scalar(amp + 1));
  cv::resize(low, up, c.img.size(), 0, 0, cv::INTER_CUBIC);
  cv::merge(std::vector<cv::Mat>{up, up, up}, noise);
  if (grain > 0) noise += grain_noise(c, grain);
  cv::add(c.img, noise, c.img, cv::noArray(), CV_8U);
}

void grain(Ctx& c, int amp) { cv::add(c.img, grain_noise(c, amp), c.img, cv::noArray(), CV_8U); }

// ---------------------------------------------------------------------------------------------------------------
// Caption helpers.

std::string num(int k) {
  static const char* const kWords[] = {"no",    "one",   "two",  "three", "four",   "five",  "six",
                                       "seven", "eight", "nine", "ten",   "eleven", "twelve"};
  return k >= 0 && k <= 12 ? kWords[k] : std::to_string(k);
}

std::string count(int k, const std::string& one, const std::string& many) {
  return num(k) + " " + (k == 1 ? one : many);
}

std::string there_are(int k, const std::string& one, const std::string& many, const std::string& rest) {
  return (k == 1 ? "there is " : "there are ") + count(k, one, many) + " " + rest;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " and " : ", ";
    out += words[i];
  }
  return out;
}

// Direction of a line at `angle` (radians, y down).
std::string orientation(double angle) {
  double deg = std::fmod(angle * 180 / kPi, 180.0);
  if (deg < 0) deg += 180;
  if (deg < 22.5 || deg >= 157.5) return "horizontally";
  if (deg >= 67.5 && deg < 112.5) return "vertically";
  if (deg < 90) return "diagonally from the top left to the bottom right";
  return "diagonally from the top right to the bottom left";
}

std::string region(P p, int n) {
  static const char* const kNames[3][3] = {{"in the upper left", "at the top", "in the upper right"},
                                           {"on the left", "in the center", "on the right"},
                                           {"in the lower left", "at the bottom", "in the lower right"}};
  const int col = std::clamp(int(3 * p.x / n), 0, 2), row = std::clamp(int(3 * p.y / n), 0, 2);
  return kNames[row][col];
}

// Centre of the boxes of class `cls` (image centre when there are none).
P centroid(const Ctx& c, int cls) {
  P sum(0, 0);
  int k = 0;
  for (size_t i = 0; i < c.out.boxes.size(); ++i) {
    if (c.out.box_classes[i] != cls) continue;
    const auto& b = c.out.boxes[i];
    sum += P((b[0] + b[2]) / 2, (b[1] + b[3]) / 2);
    ++k;
  }
  return k ? sum / k : P(c.n / 2.0, c.n / 2.0);
}

// The most frequent name (first seen wins ties).
std::string majority(const std::vector<std::string>& names) {
  std::string best;
  int best_count = 0;
  for (const auto& a : names) {
    const int k = int(std::count(names.begin(), names.end(), a));
    if (k > best_count) best = a, best_count = k;
  }
  return best;
}

std::vector<std::string> unique_in_order(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& a : names)
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  return out;
}

using Captions = std::vector<std::string>;

// ---------------------------------------------------------------------------------------------------------------
// Scenes. Each draws into c.img (objects through place()) and returns its candidate captions, all of which name
// the scene (field, forest, lake, ...) so that every caption is informative about the class.

Captions farmland(Ctx& c) {
  static const std::vector<Named> kCrops = {{"green", rgb(70, 130, 50)},     {"light green", rgb(125, 170, 75)},
                                            {"yellow", rgb(205, 185, 95)},   {"brown", rgb(135, 100, 70)},
                                            {"dark green", rgb(45, 95, 40)}, {"golden", rgb(190, 150, 70)}};
  const double n = c.n;
  const P mid(n / 2, n / 2);
  const double angle = c.rng.uniform(0, kPi);
  const P d(std::cos(angle), std::sin(angle)), nrm(-std::sin(angle), std::cos(angle));
  const double reach = n * 0.75, half = n / 2 * (std::abs(nrm.x) + std::abs(nrm.y));
  c.img.setTo(rgb(150, 130, 95));
  std::vector<std::string> colors;
  int prev = -1;
  for (double t = -reach; t < reach;) {
    const double t1 = std::min(t + c.rng.uniform(0.09, 0.25) * n, reach);
    int k = c.rng.randint(0, int(kCrops.size()) - 1);
    if (k == prev) k = (k + 1) % int(kCrops.size());
    prev = k;
    const cv::Scalar col = jitter(c.rng, kCrops[size_t(k)].color, 10);
    fill_convex(
        c.img,
        {mid + nrm * t - d * reach, mid + nrm * t + d * reach, mid + nrm * t1 + d * reach, mid + nrm * t1 - d * reach},
        col);
    if (c.rng.chance(0.7)) {  // crop rows
      const double gap = c.px(c.rng.uniform(3.5, 5.5), 2.0);
      for (double r = t + gap / 2; r < t1 - gap / 4; r += gap)
        band(c.img, mid + nrm * r - d * reach, mid + nrm * r + d * reach, c.px(1.0, 0.7), shade(col, 0.85));
    }
    if (t1 > -half && t < half) colors.push_back(kCrops[size_t(k)].name);
    if (c.rng.chance(0.35))  // a dirt track between fields
      band(c.img, mid + nrm * t1 - d * reach, mid + nrm * t1 + d * reach, c.px(2.0), rgb(165, 145, 110));
    t = t1;
  }
  texture(c, 10, 10, 4);
  static const std::vector<Named> kRoofs = {
      {"red", rgb(165, 65, 50)}, {"gray", rgb(120, 120, 125)}, {"white", rgb(215, 215, 210)}};
  if (c.rng.chance(0.4)) {
    const P farm = c.point(c.px(30));
    const int want = c.rng.randint(1, 3);
    for (int i = 0, tries = 0; i < want && tries < 12; ++tries) {
      const P at = farm + c.offset(c.px(22));
      double ang = angle + (c.rng.chance(0.5) ? 0 : kPi / 2);
      ang += c.rng.uniform(-0.1, 0.1);
      const double len = c.px(c.rng.uniform(12, 20), 5), wid = c.px(c.rng.uniform(8, 13), 4);
      const cv::Scalar roof = jitter(c.rng, c.pick(kRoofs).color, 8);
      i += place(c, house(at, ang, len, wid, roof), c.px(3));
    }
  }
  const int fields = int(colors.size()), buildings = c.count(kBuilding);
  // The (at most) three most common crop colours, most common first, in palette order on ties.
  std::vector<std::string> palette;
  for (const Named& crop : kCrops)
    if (std::count(colors.begin(), colors.end(), crop.name) > 0) palette.push_back(crop.name);
  std::stable_sort(palette.begin(), palette.end(), [&](const std::string& a, const std::string& b) {
    return std::count(colors.begin(), colors.end(), a) > std::count(colors.begin(), colors.end(), b);
  });
  if (palette.size() > 3) palette.resize(3);
  const std::string main_color = palette.empty() ? "green" : palette.front();
  Captions caps = {
      "farmland divided into " + num(fields) + " parallel strips of fields",
      join(palette) + " fields arranged in long parallel strips",
      "strips of cultivated fields run " + orientation(angle) + " across the image",
      "an agricultural area with " + join(palette) + " crop fields",
      "aerial view of farmland with " + num(fields) + " fields of different crops",
      "long narrow fields of " + main_color + " crops lie side by side",
  };
  if (main_color.find("green") != std::string::npos) caps.push_back("green farmland divided into rectangular fields");
  if (buildings > 0) {
    caps.push_back("a farm with " + count(buildings, "small building", "small buildings") + " among the fields");
    caps.push_back(count(buildings, "farm building stands ", "farm buildings stand ") +
                   region(centroid(c, kBuilding), c.n) + " of the fields");
  } else {
    caps.push_back("only fields are visible, with no buildings on the farmland");
  }
  return caps;
}

Captions forest(Ctx& c) {
  const double n = c.n;
  c.img.setTo(jitter(c.rng, rgb(40, 75, 35), 8));
  texture(c, 8, 14, 4);
  const bool has_clearing = c.rng.chance(0.3), has_path = c.rng.chance(0.35), autumn = c.rng.chance(0.2);
  P clearing_at(0, 0);
  double ca = 0, cb = 0;
  if (has_clearing) {
    clearing_at = c.point(c.px(40));
    ca = c.px(c.rng.uniform(22, 45));
    cb = c.px(c.rng.uniform(18, 35));
    cv::ellipse(c.img, fixed_point(clearing_at, {0, 0}), cv::Size(int(ca * kOne), int(cb * kOne)), 0, 0, 360,
                jitter(c.rng, rgb(110, 145, 75), 10), cv::FILLED, cv::LINE_AA, kShift);
  }
  static const cv::Scalar kGreens[] = {rgb(35, 80, 35), rgb(50, 95, 40), rgb(30, 65, 30), rgb(60, 105, 50)};
  static const cv::Scalar kAutumn[] = {rgb(190, 120, 40), rgb(200, 170, 60), rgb(160, 70, 40)};
  const int trees = int(330 * c.s * c.s) + 12;
  for (int i = 0; i < trees; ++i) {
    const P at = c.point(-4);
    const double r = c.px(c.rng.uniform(3.5, 8.0), 1.5);
    const bool orange = autumn && c.rng.chance(0.25);
    const cv::Scalar col = jitter(c.rng, orange ? kAutumn[c.rng.randint(0, 2)] : kGreens[c.rng.randint(0, 3)], 10);
    if (has_clearing) {
      const double dx = (at.x - clearing_at.x) / ca, dy = (at.y - clearing_at.y) / cb;
      if (dx * dx + dy * dy < 1.0) continue;
    }
    disc(c.img, at, r, col);
    disc(c.img, at - P(0.25, 0.25) * r, 0.5 * r, shade(col, 1.25));
  }
  double path_angle = 0;
  if (has_path) {
    path_angle = c.rng.uniform(0, kPi);
    const P d(std::cos(path_angle), std::sin(path_angle)), nrm(-d.y, d.x);
    const P start = P(n / 2, n / 2) + nrm * c.rng.uniform(-0.25, 0.25) * n;
    const Wave w = make_wave(c.rng, n, 0, c.px(12));
    std::vector<P> pts;
    for (int i = 0; i <= 24; ++i) {
      const double t = -0.75 * n + 1.5 * n * i / 24;
      pts.push_back(start + d * t + nrm * w(t));
    }
    polyline(c.img, pts, jitter(c.rng, rgb(140, 115, 80), 10), c.px(3.5, 1.0));
  }
  Captions caps = {
      "a dense forest with a dark green canopy", "thick woodland seen from above, covered with tree crowns",
      "many trees cover the whole forest area",  "green treetops of a forest fill the image",
      "an aerial view of a large forest",
  };
  if (has_path) {
    caps.push_back("a dirt path winds through the forest");
    caps.push_back("a narrow trail crosses the dense woods " + orientation(path_angle));
  } else {
    caps.push_back("a forest with no roads or buildings");
  }
  if (has_clearing) caps.push_back("there is a grassy clearing " + region(clearing_at, c.n) + " of the forest");
  if (autumn) caps.push_back("some trees in the forest show orange and yellow autumn colors");
  return caps;
}

Captions lake(Ctx& c) {
  const double n = c.n;
  c.img.setTo(jitter(c.rng, rgb(40, 90, 150), 10));
  texture(c, 6, 12, 4);
  const double wind = c.rng.uniform(0, 180);
  const cv::Scalar ripple = rgb(90, 140, 190);
  const int ripples = int(40 * c.s * c.s) + 3;
  for (int i = 0; i < ripples; ++i) {
    const P at = c.point();
    const cv::Size axes{int(c.px(c.rng.uniform(6, 14)) * kOne),
                        int(c.px(c.rng.uniform(1, 3)) * kOne)};  // braced: in order
    const double tilt = wind + c.rng.uniform(-10, 10);
    cv::ellipse(c.img, fixed_point(at, {0, 0}), axes, tilt, 0, 180, ripple, 1, cv::LINE_AA, kShift);
  }
  const bool shore = c.rng.chance(0.8), island = c.rng.chance(0.3);
  const int side = c.rng.randint(0, 3);
  const double depth = c.rng.uniform(0.15, 0.4) * n;
  if (shore) {
    const Wave w = make_wave(c.rng, n, depth, 0.06 * n);
    fill_poly(c.img, side_region(side, n, w, c.px(4)), jitter(c.rng, rgb(200, 185, 140), 8));
    fill_poly(c.img, side_region(side, n, w, 0), jitter(c.rng, rgb(85, 130, 60), 10));
    const int bushes = int(25 * c.s * c.s) + 2;
    for (int i = 0; i < bushes; ++i) {
      const double u = c.rng.uniform(0, n), r = c.px(c.rng.uniform(2.5, 5), 1.0);
      const double v = c.rng.uniform(0, std::max(0.0, w(u) - r - c.px(3)));
      disc(c.img, from_side(side, n, u, v), r, jitter(c.rng, rgb(45, 90, 40), 8));
    }
  }
  P island_at(0, 0);
  if (island) {
    const double v = shore ? c.rng.uniform(depth + 0.25 * n, n - 0.15 * n) : c.rng.uniform(0.3 * n, 0.7 * n);
    island_at = from_side(side, n, c.rng.uniform(0.25 * n, 0.75 * n), v);
    const double r = c.px(c.rng.uniform(14, 30));
    std::vector<P> outline;
    for (int i = 0; i < 14; ++i) {
      const double a = 2 * kPi * i / 14;
      outline.push_back(island_at + P(std::cos(a), std::sin(a)) * r * c.rng.uniform(0.75, 1.15));
    }
    std::vector<P> beach = outline;
    for (P& p : beach) p = island_at + (p - island_at) * 1.18;
    fill_poly(c.img, beach, rgb(205, 190, 145));
    fill_poly(c.img, outline, jitter(c.rng, rgb(80, 125, 55), 10));
  }
  Captions caps = {
      "a calm blue lake with small ripples on the water",
      "an aerial view of a lake",
      "dark blue lake water with gentle ripples",
  };
  if (shore) {
    caps.push_back("the shore of the lake runs along the " + std::string(side_name(side)) + " side");
    caps.push_back("a lake with a green grassy shore on the " + std::string(side_name(side)));
    caps.push_back("blue water bordered by grass and a thin strip of sand on the " + std::string(side_name(side)));
    if (depth < 0.3 * n) caps.push_back("deep blue lake water covers most of the image");
  } else {
    caps.push_back("open water fills the whole image with no visible shore of the lake");
    caps.push_back("the lake covers the entire image");
    caps.push_back("nothing but blue water is visible on this lake");
  }
  if (island) caps.push_back("a small green island sits " + region(island_at, c.n) + " of the lake");
  return caps;
}

Captions residential(Ctx& c) {
  static const std::vector<Named> kRoofs = {{"red", rgb(170, 70, 55)},      {"brown", rgb(130, 90, 60)},
                                            {"dark gray", rgb(80, 80, 85)}, {"light gray", rgb(175, 175, 170)},
                                            {"blue", rgb(70, 90, 135)},     {"orange", rgb(205, 120, 60)}};
  static const std::vector<Named> kCars = {{"white", rgb(235, 235, 235)},
                                           {"black", rgb(30, 30, 32)},
                                           {"red", rgb(190, 40, 35)},
                                           {"blue", rgb(40, 70, 170)},
                                           {"silver", rgb(170, 172, 178)}};
  const double n = c.n;
  c.img.setTo(jitter(c.rng, rgb(105, 145, 80), 10));
  texture(c, 12, 10, 4);
  const int trees = int(60 * c.s * c.s) + 3;
  for (int i = 0; i < trees; ++i) {
    const P at = c.point();
    const double r = c.px(c.rng.uniform(3, 6), 1.0);
    disc(c.img, at, r, jitter(c.rng, rgb(50, 95, 45), 10));
  }
  const double block = c.px(c.rng.uniform(58, 84), 14), street = c.px(c.rng.uniform(6, 9), 2);
  const double ox = c.rng.uniform(0, block), oy = c.rng.uniform(0, block);
  std::vector<double> xs, ys;
  for (double x = ox - block; x < n + block; x += block) xs.push_back(x);
  for (double y = oy - block; y < n + block; y += block) ys.push_back(y);
  const cv::Scalar walk = rgb(175, 175, 170), asphalt = jitter(c.rng, rgb(120, 120, 122), 6);
  for (const double x : xs) band(c.img, P(x, -2), P(x, n + 2), street + c.px(2.0), walk);
  for (const double y : ys) band(c.img, P(-2, y), P(n + 2, y), street + c.px(2.0), walk);
  for (const double x : xs) band(c.img, P(x, -2), P(x, n + 2), street, asphalt);
  for (const double y : ys) band(c.img, P(-2, y), P(n + 2, y), street, asphalt);
  std::vector<std::string> roof_names;
  const Named& common_roof = c.pick(kRoofs);
  const double edge = street / 2 + c.px(2.0);
  for (size_t i = 0; i + 1 < xs.size(); ++i) {
    for (size_t j = 0; j + 1 < ys.size(); ++j) {
      const double x0 = xs[i] + edge, x1 = xs[i + 1] - edge, y0 = ys[j] + edge, y1 = ys[j + 1] - edge;
      if (x1 < 0 || y1 < 0 || x0 > n || y0 > n) continue;
      for (int t = 0; t < 5; ++t) {
        const double len = c.px(c.rng.uniform(13, 20), 5), wid = c.px(c.rng.uniform(9, 13), 4);
        const int facing = c.rng.randint(0, 3);  // which street the house faces
        const double setback = c.px(c.rng.uniform(1, 4));
        P at;
        double ang;
        if (facing < 2) {
          ang = 0;
          at = P(c.rng.uniform(x0 + len / 2, x1 - len / 2),
                 facing == 0 ? y0 + setback + wid / 2 : y1 - setback - wid / 2);
        } else {
          ang = kPi / 2;
          at = P(facing == 2 ? x0 + setback + wid / 2 : x1 - setback - wid / 2,
                 c.rng.uniform(y0 + len / 2, y1 - len / 2));
        }
        if (c.rng.chance(0.4)) ang += c.rng.uniform(-0.06, 0.06);
        const Named& roof = c.rng.chance(0.55) ? common_roof : c.pick(kRoofs);
        if (place(c, house(at, ang, len, wid, jitter(c.rng, roof.color, 8)), c.px(2.5)))
          roof_names.push_back(roof.name);
      }
    }
  }
  std::vector<std::string> car_names;
  const int want_cars = c.rng.randint(0, 6);
  for (int i = 0, tries = 0; i < want_cars && tries < 20; ++tries) {
    const bool vertical = c.rng.chance(0.5);
    const auto& lines = vertical ? xs : ys;
    const double at = lines[size_t(c.rng.randint(0, int(lines.size()) - 1))];
    const double along = c.rng.uniform(0, n), lane = (c.rng.chance(0.5) ? 1 : -1) * street / 4;
    const P p = vertical ? P(at + lane, along) : P(along, at + lane);
    const double ang = (vertical ? kPi / 2 : 0) + (c.rng.chance(0.5) ? kPi : 0);
    const Named& col = c.pick(kCars);
    if (place(c, car(p, ang, c.px(c.rng.uniform(8, 11), 4), std::min(c.px(4.5, 2), street * 0.42), col.color),
              c.px(1.5))) {
      car_names.push_back(col.name);
      ++i;
    }
  }
  const int houses = int(roof_names.size()), cars = int(car_names.size());
  const std::string roof = majority(roof_names);
  Captions caps = {
      "a residential area with " + count(houses, "house", "houses") + " along a grid of streets",
      "streets cross the residential neighborhood in a regular grid",
      "houses of a residential area surrounded by green lawns and trees",
      "an aerial view of a residential neighborhood with gray streets",
  };
  if (houses > 0) {
    caps.push_back("rows of houses with mostly " + roof + " roofs between gray streets");
    caps.push_back("most roofs in the neighborhood are " + roof);
  }
  caps.push_back(houses * 1.0 > 14 * c.s * c.s * 2 ? "densely packed homes in a residential district"
                                                   : "detached houses with gardens in a residential district");
  if (cars > 0) {
    caps.push_back("a suburban neighborhood with " + count(houses, "building", "buildings") + " and " +
                   count(cars, "car", "cars"));
    caps.push_back(there_are(cars, "car", "cars", "on the streets of the neighborhood"));
  } else {
    caps.push_back("a quiet suburban neighborhood with no cars on the streets");
  }
  return caps;
}

Captions airport(Ctx& c) {
  const double n = c.n;
  c.img.setTo(jitter(c.rng, rgb(140, 155, 100), 10));
  texture(c, 10, 10, 4);
  const double angle = c.rng.uniform(0, kPi);
  const P d(std::cos(angle), std::sin(angle)), nrm(-d.y, d.x);
  const P mid = P(n / 2, n / 2) + nrm * c.rng.uniform(-0.15, 0.15) * n;
  const Frame rw(mid, angle);
  const double width = c.px(c.rng.uniform(22, 32), 6), half_len = n * c.rng.uniform(0.5, 0.8);
  const int sgn = c.rng.chance(0.5) ? 1 : -1;  // side of the apron
  const double gap = c.px(c.rng.uniform(12, 24), 3), apron_w = c.px(c.rng.uniform(48, 72), 14);
  const double apron_len = n * c.rng.uniform(0.5, 0.9), apron_at = c.rng.uniform(-0.2, 0.2) * n;
  const double near = sgn * (width / 2 + gap), far = sgn * (width / 2 + gap + apron_w);
  const cv::Scalar concrete = jitter(c.rng, rgb(165, 165, 160), 6), taxi = rgb(95, 95, 98);
  for (int k = 0; k < 2; ++k) {  // taxiways
    const double x = apron_at + (k == 0 ? -0.3 : 0.3) * apron_len;
    band(c.img, rw(x, 0), rw(x, near + sgn * c.px(2)), c.px(8, 2), taxi);
  }
  fill_convex(c.img, rect_pts(rw, apron_at - apron_len / 2, near, apron_at + apron_len / 2, far), concrete);
  fill_convex(c.img, rect_pts(rw, -half_len, -width / 2, half_len, width / 2), jitter(c.rng, rgb(70, 70, 74), 4));
  const cv::Scalar white = rgb(235, 235, 235);
  const double line = c.px(1.2, 0.8);
  for (double side : {-1.0, 1.0})
    band(c.img, rw(-half_len, side * (width / 2 - c.px(2))), rw(half_len, side * (width / 2 - c.px(2))), line, white);
  for (double x = -half_len + c.px(30); x < half_len - c.px(30); x += c.px(16))
    band(c.img, rw(x, 0), rw(x + c.px(9), 0), line * 1.3, white);
  for (double end : {-1.0, 1.0}) {  // threshold markings
    for (int k = -3; k <= 3; ++k) {
      if (k == 0) continue;
      const double y = k * width / 8;
      band(c.img, rw(end * (half_len - c.px(4)), y), rw(end * (half_len - c.px(16)), y), width / 14, white);
    }
  }
  static const std::vector<Named> kTerminal = {{"gray", rgb(180, 180, 190)}, {"white", rgb(215, 215, 215)}};
  bool terminal = false;
  if (c.rng.chance(0.6)) {
    const double tw = c.px(c.rng.uniform(12, 18), 4);
    terminal = place(c,
                     flat_building(rw(apron_at, far + sgn * (c.px(4) + tw / 2)), angle, apron_len * 0.6, tw,
                                   jitter(c.rng, c.pick(kTerminal).color, 6)),
                     c.px(2));
  }
  const double plane_len = c.px(c.rng.uniform(26, 40), 9);
  const bool gray_fleet = c.rng.chance(0.3);
  const cv::Scalar body = gray_fleet ? rgb(185, 188, 195) : rgb(238, 238, 238);
  int apron_planes = 0, runway_planes = 0;
  const int want = c.rng.randint(0, 5);
  for (int tries = 0; apron_planes < want && tries < 4 * want; ++tries) {
    const double x = c.rng.uniform(apron_at - apron_len / 2 + plane_len / 2, apron_at + apron_len / 2 - plane_len / 2);
    const double y = sgn * c.rng.uniform(width / 2 + gap + plane_len / 2, width / 2 + gap + apron_w - plane_len / 2);
    double heading = angle - sgn * kPi / 2 + c.rng.uniform(-0.25, 0.25);  // nose towards the runway
    if (c.rng.chance(0.25)) heading = c.rng.uniform(0, 2 * kPi);
    apron_planes += place(c, plane(rw(x, y), heading, plane_len, jitter(c.rng, body, 6)), c.px(3));
  }
  if (c.rng.chance(0.3)) {
    const P at = rw(c.rng.uniform(-0.35, 0.35) * n, 0);
    const double heading = angle + (c.rng.chance(0.5) ? 0 : kPi);
    runway_planes += place(c, plane(at, heading, plane_len, jitter(c.rng, body, 6)), c.px(3));
  }
  const int planes = apron_planes + runway_planes;
  const std::string colour = gray_fleet ? "gray" : "white";
  Captions caps = {
      planes == 0 ? "there are no planes at the airport" : there_are(planes, "plane", "planes", "at the airport"),
      "an airport with a runway running " + orientation(angle),
      "a gray runway with white markings crosses the airport " + orientation(angle),
      "an airfield with a long runway surrounded by grass",
      "aerial view of an airport with " + count(planes, "aircraft", "aircraft"),
  };
  if (apron_planes > 0) {
    caps.push_back(count(apron_planes, colour + " airplane is", colour + " airplanes are") +
                   " parked on the apron next to the runway");
    caps.push_back(there_are(apron_planes, "plane", "planes", "parked near the runway"));
  } else {
    caps.push_back("the apron next to the airport runway is empty");
  }
  if (runway_planes > 0) caps.push_back("one plane is on the runway, ready for takeoff");
  if (terminal) caps.push_back("a terminal building of the airport stands beside the apron");
  return caps;
}

Captions harbor(Ctx& c) {
  static const std::vector<Named> kHulls = {{"white", rgb(232, 232, 228)},   {"red", rgb(170, 55, 45)},
                                            {"dark blue", rgb(45, 60, 105)}, {"gray", rgb(120, 122, 128)},
                                            {"orange", rgb(215, 120, 45)},   {"green", rgb(60, 120, 70)}};
  static const std::vector<Named> kWarehouses = {
      {"light gray", rgb(185, 185, 180)}, {"blue", rgb(90, 115, 160)}, {"rust", rgb(160, 95, 70)}};
  const double n = c.n;
  const int side = c.rng.randint(0, 3);
  const double quay = c.rng.uniform(0.2, 0.36) * n;
  auto map = [&](P p) { return from_side(side, n, p.x, p.y); };
  c.img.setTo(jitter(c.rng, rgb(35, 85, 125), 8));
  fill_convex(c.img, {map(P(-2, -2)), map(P(n + 2, -2)), map(P(n + 2, quay)), map(P(-2, quay))},
              jitter(c.rng, rgb(160, 158, 150), 6));
  texture(c, 10, 8, 4);
  band(c.img, map(P(-2, quay)), map(P(n + 2, quay)), c.px(1.5), rgb(90, 90, 90));
  const int ripples = int(20 * c.s * c.s) + 2;
  for (int i = 0; i < ripples; ++i) {
    const P at = map(c.point(0, n, quay + c.px(8), n));
    const double tilt = c.rng.uniform(0, 180);
    cv::ellipse(c.img, fixed_point(at, {0, 0}), cv::Size(int(c.px(8) * kOne), int(c.px(1.5) * kOne)), tilt, 0, 180,
                rgb(75, 120, 160), 1, cv::LINE_AA, kShift);
  }
  struct Pier {
    double u, width, len;
  };
  std::vector<Pier> piers;
  const int want_piers = c.rng.randint(1, 4);
  const cv::Scalar pier_color = c.rng.chance(0.3) ? rgb(130, 100, 70) : rgb(150, 150, 145);
  for (int tries = 0; int(piers.size()) < want_piers && tries < 30; ++tries) {
    const double u = c.rng.uniform(c.px(18), n - c.px(18));
    bool ok = true;
    for (const Pier& p : piers) ok = ok && std::abs(p.u - u) > c.px(55);
    if (!ok) continue;
    const Pier p{u, c.px(c.rng.uniform(6, 10), 3), (n - quay) * c.rng.uniform(0.35, 0.65)};
    piers.push_back(p);
    fill_convex(c.img,
                {map(P(u - p.width / 2, quay - 1)), map(P(u + p.width / 2, quay - 1)),
                 map(P(u + p.width / 2, quay + p.len)), map(P(u - p.width / 2, quay + p.len))},
                pier_color);
  }
  int warehouses = 0;
  const int want_warehouses = c.rng.randint(0, 3);
  for (int tries = 0; warehouses < want_warehouses && tries < 10; ++tries) {
    const double len = c.px(c.rng.uniform(30, 55), 8),
                 wid = std::min(c.px(c.rng.uniform(14, 22), 5), quay - c.px(8, 3));
    if (wid < 3) break;
    const P at = c.point(0, n, c.px(4) + wid / 2, quay - c.px(4) - wid / 2);
    Object o = flat_building(at, 0, len, wid, jitter(c.rng, c.pick(kWarehouses).color, 6));
    o.map(map);
    warehouses += place(c, o, c.px(3));
  }
  std::vector<std::string> docked_colors;
  for (const Pier& p : piers) {
    for (double s : {-1.0, 1.0}) {
      if (!c.rng.chance(0.65)) continue;
      const double len = std::min(c.px(c.rng.uniform(22, 44), 8), p.len - c.px(4));
      if (len < c.px(10, 6)) continue;
      const double beam = len * c.rng.uniform(0.2, 0.27);
      const P at(p.u + s * (p.width / 2 + beam / 2 + c.px(1.5)),
                 quay + c.px(3) + len / 2 + c.rng.uniform(0, std::max(0.0, p.len - len - c.px(3))));
      const Named& hull = c.pick(kHulls);
      const double heading = c.rng.chance(0.5) ? kPi / 2 : -kPi / 2;
      const cv::Scalar color = jitter(c.rng, hull.color, 6);
      Object o = ship(at, heading, len, beam, color, c.rng);
      o.map(map);
      if (place(c, o, c.px(1))) docked_colors.push_back(hull.name);
    }
  }
  int sailing = 0;
  const int want_sailing = c.rng.randint(0, 2);
  for (int tries = 0; sailing < want_sailing && tries < 8; ++tries) {
    const double len = c.px(c.rng.uniform(18, 40), 7);
    const P at = c.point(0, n, quay + c.px(20) + len / 2, n);
    const double heading = c.rng.uniform(0, 2 * kPi), beam = len * c.rng.uniform(0.2, 0.27);
    const cv::Scalar color = jitter(c.rng, c.pick(kHulls).color, 6);
    Object o = ship(at, heading, len, beam, color, c.rng);
    o.map(map);
    sailing += place(c, o, c.px(4));
  }
  const int docked = int(docked_colors.size()), ships = docked + sailing, np = int(piers.size());
  const std::string shore = side_name(side);
  Captions caps = {
      ships == 0 ? "there are no ships in the harbor" : there_are(ships, "ship", "ships", "in the harbor"),
      count(np, "pier extends", "piers extend") + " from the " + shore + " shore into the harbor water",
      "a harbor with concrete docks along the " + shore + " side and blue water",
      "aerial view of a harbor with " + count(np, "pier", "piers") + " and " + count(ships, "ship", "ships"),
      "a port where piers reach out into blue water",
  };
  if (docked > 0) {
    caps.push_back("a harbor with " + count(docked, "ship", "ships") + " docked at the " +
                   (np == 1 ? "pier" : "piers"));
    caps.push_back("a " + docked_colors.front() + " ship is moored at a pier in the port");
  } else {
    caps.push_back("the piers of the harbor are empty, with no ships moored");
  }
  if (sailing > 0) caps.push_back(count(sailing, "ship is", "ships are") + " sailing in open water outside the harbor");
  if (warehouses > 0)
    caps.push_back(count(warehouses, "warehouse stands", "warehouses stand") + " on the quay of the port");
  return caps;
}

Captions highway(Ctx& c) {
  static const std::vector<Named> kColors = {{"white", rgb(235, 235, 235)},  {"black", rgb(30, 30, 32)},
                                             {"red", rgb(190, 40, 35)},      {"blue", rgb(40, 70, 170)},
                                             {"silver", rgb(170, 172, 178)}, {"yellow", rgb(220, 190, 40)}};
  const double n = c.n;
  c.img.setTo(jitter(c.rng, rgb(115, 145, 80), 12));
  texture(c, 8, 12, 4);
  const int trees = int(40 * c.s * c.s) + 3;
  for (int i = 0; i < trees; ++i) {
    const P at = c.point();
    const double r = c.px(c.rng.uniform(3, 6), 1.0);
    disc(c.img, at, r, jitter(c.rng, rgb(50, 95, 45), 10));
  }
  const double angle = c.rng.uniform(0, kPi);
  const P nrm(-std::sin(angle), std::cos(angle));
  const Frame road(P(n / 2, n / 2) + nrm * c.rng.uniform(-0.2, 0.2) * n, angle);
  const int per_dir = c.rng.randint(1, 3), lanes = 2 * per_dir;
  const double lane = c.px(c.rng.uniform(9, 12), 4);
  const bool divided = per_dir >= 2 && c.rng.chance(0.7);
  const double median = divided ? c.px(c.rng.uniform(6, 12), 2) : 0, shoulder = c.px(3);
  const double half = median / 2 + per_dir * lane + shoulder, far = 1.5 * n;
  fill_convex(c.img, rect_pts(road, -far, -half, far, half), jitter(c.rng, rgb(85, 85, 88), 4));
  const bool green_median = c.rng.chance(0.5);
  if (divided)
    fill_convex(c.img, rect_pts(road, -far, -median / 2, far, median / 2),
                green_median ? rgb(100, 135, 75) : rgb(150, 150, 145));
  const cv::Scalar white = rgb(235, 235, 235);
  const double line = c.px(1.2, 0.8);
  for (double s : {-1.0, 1.0}) {
    band(c.img, road(-far, s * (half - shoulder)), road(far, s * (half - shoulder)), line, white);
    for (int k = 1; k < per_dir; ++k) {
      const double y = s * (median / 2 + k * lane);
      for (double x = -far; x < far; x += c.px(14)) band(c.img, road(x, y), road(x + c.px(7), y), line, white);
    }
  }
  if (!divided)
    for (double s : {-1.0, 1.0}) band(c.img, road(-far, s * line), road(far, s * line), line, rgb(220, 190, 60));
  std::vector<std::string> colors;
  int cars = 0, trucks = 0;
  const int want = c.rng.randint(0, 5 * per_dir + 2);
  for (int tries = 0; cars + trucks < want && tries < 4 * want; ++tries) {
    const double s = c.rng.chance(0.5) ? 1.0 : -1.0;
    const int k = c.rng.randint(0, per_dir - 1);
    const P at = road(c.rng.uniform(-0.72, 0.72) * n, s * (median / 2 + (k + 0.5) * lane));
    const double heading = angle + (s > 0 ? 0 : kPi);
    const Named& col = c.pick(kColors);
    if (c.rng.chance(0.2)) {
      const cv::Scalar trailer = c.rng.chance(0.6) ? rgb(225, 225, 220) : rgb(140, 140, 145);
      if (place(c, truck(at, heading, c.px(c.rng.uniform(20, 28), 7), lane * 0.7, col.color, trailer), c.px(2))) {
        ++trucks;
        colors.push_back(col.name);
      }
    } else if (place(c, car(at, heading, c.px(c.rng.uniform(9, 12), 4), lane * 0.5, col.color), c.px(2))) {
      ++cars;
      colors.push_back(col.name);
    }
  }
  const int vehicles = cars + trucks;
  const std::string dir = orientation(angle);
  Captions caps = {
      "a highway with " + num(lanes) + " lanes running " + dir,
      vehicles == 0 ? "an empty highway with no vehicles"
                    : there_are(vehicles, "vehicle", "vehicles", "on the highway"),
      (lanes >= 4 ? "a multi-lane highway crosses green fields " : "a two-lane road crosses green fields ") + dir,
      "white lane markings divide the asphalt road into " + num(lanes) + " lanes",
      "an aerial view of a highway through the countryside",
  };
  if (divided)
    caps.push_back("a divided highway with a " + std::string(green_median ? "grassy" : "concrete") +
                   " median between the two directions");
  else
    caps.push_back("a road with a yellow center line separating the two directions of traffic");
  if (vehicles > 0)
    caps.push_back("the road carries " + count(cars, "car", "cars") + " and " + count(trucks, "truck", "trucks"));
  if (vehicles >= 3) caps.push_back("most vehicles on the highway are " + majority(colors));
  return caps;
}

Captions storage(Ctx& c) {
  static const std::vector<Named> kTanks = {{"white", rgb(228, 228, 222)},
                                            {"light gray", rgb(195, 195, 192)},
                                            {"green", rgb(115, 140, 105)},
                                            {"beige", rgb(210, 195, 160)}};
  const double n = c.n;
  c.img.setTo(jitter(c.rng, rgb(175, 165, 145), 10));
  texture(c, 10, 10, 4);
  const int rows = c.rng.randint(1, 3), cols = c.rng.randint(2, 4);
  const double r = c.px(c.rng.uniform(11, 22), 4), step = 2.1 * r + c.px(c.rng.uniform(6, 14), 3);
  const P grid = c.point(0.35 * n);
  const P g0 = grid - P((cols - 1) / 2.0, (rows - 1) / 2.0) * step;
  const double bx = (cols / 2.0) * step + c.px(6), by = (rows / 2.0) * step + c.px(6);
  fill_convex(c.img, {grid + P(-bx, -by), grid + P(bx, -by), grid + P(bx, by), grid + P(-bx, by)},
              jitter(c.rng, rgb(190, 185, 172), 5));
  const cv::Scalar berm = rgb(150, 132, 100), pipe = rgb(90, 90, 95);
  const double bw = c.px(3);
  band(c.img, grid + P(-bx, -by), grid + P(bx, -by), bw, berm);
  band(c.img, grid + P(bx, -by), grid + P(bx, by), bw, berm);
  band(c.img, grid + P(bx, by), grid + P(-bx, by), bw, berm);
  band(c.img, grid + P(-bx, by), grid + P(-bx, -by), bw, berm);
  for (int i = 0; i < rows; ++i) {
    const double y = g0.y + i * step;
    band(c.img, P(g0.x, y), P(-2, y), c.px(1.5), pipe);
    band(c.img, P(g0.x, y), P(g0.x + (cols - 1) * step, y), c.px(1.5), pipe);
  }
  const bool uniform_color = c.rng.chance(0.7);
  const Named& main_color = c.pick(kTanks);
  std::vector<std::string> colors;
  std::vector<int> row_used(size_t(rows), 0);
  std::vector<int> present(size_t(rows * cols));
  for (int& p : present) p = c.rng.chance(0.85);
  if (std::count(present.begin(), present.end(), 1) < 2) std::fill(present.begin(), present.end(), 1);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      if (!present[size_t(i * cols + j)]) continue;
      const Named& col = uniform_color ? main_color : c.pick(kTanks);
      const P at = g0 + P(j, i) * step + c.offset(c.px(1.5, 0));
      const double radius = r * c.rng.uniform(0.9, 1.05);
      if (place(c, tank(at, radius, jitter(c.rng, col.color, 5)), 2.0)) {
        colors.push_back(col.name);
        row_used[size_t(i)] = 1;
      }
    }
  }
  const int grid_tanks = int(colors.size());
  const int extra = c.rng.randint(0, 2);
  for (int i = 0, tries = 0; i < extra && tries < 8; ++tries) {
    const Named& col = c.pick(kTanks);
    const P at = c.point(c.px(10));
    const double radius = c.px(c.rng.uniform(7, 12), 3);
    if (place(c, tank(at, radius, jitter(c.rng, col.color, 5)), c.px(5))) {
      colors.push_back(col.name);
      ++i;
    }
  }
  const int tanks = int(colors.size()), used_rows = int(std::count(row_used.begin(), row_used.end(), 1));
  const auto names = unique_in_order(colors);
  const std::string color = names.size() == 1 ? names[0] + " " : "";
  Captions caps = {
      "an industrial area with " + count(tanks, color + "storage tank", color + "storage tanks"),
      "an industrial site with " + count(tanks, "cylindrical tank", "cylindrical tanks"),
      "aerial view of an oil depot with round storage tanks",
      tanks == 0 ? "there are no storage tanks inside the earth wall"
                 : there_are(tanks, "storage tank", "storage tanks", "at the depot"),
      "the storage tanks are grouped " + region(grid, c.n) + " of the image",
      "storage tanks connected by pipelines on bare ground",
  };
  if (grid_tanks >= 2) caps.push_back("round storage tanks arranged in " + count(used_rows, "row", "rows"));
  if (names.size() > 1) caps.push_back("storage tanks in " + join(names) + " stand side by side");
  return caps;
}

Captions beach(Ctx& c) {
  static const cv::Scalar kUmbrellas[] = {rgb(220, 50, 50), rgb(250, 200, 40), rgb(40, 120, 220), rgb(240, 240, 240),
                                          rgb(240, 120, 30)};
  const double n = c.n;
  const int side = c.rng.randint(0, 3);
  const Wave w = make_wave(c.rng, n, c.rng.uniform(0.3, 0.55) * n, 0.04 * n);
  const double shallow = c.px(c.rng.uniform(10, 25), 3);
  c.img.setTo(jitter(c.rng, rgb(222, 205, 160), 8));
  const bool vegetation = c.rng.chance(0.5);
  const Wave back = make_wave(c.rng, n, n - c.rng.uniform(0.08, 0.2) * n, 0.04 * n);
  if (vegetation) fill_poly(c.img, side_region(side, n, back, 0, true), jitter(c.rng, rgb(80, 125, 60), 10));
  texture(c, 10, 8, 4);
  fill_poly(c.img, side_region(side, n, w, c.px(5)), rgb(185, 165, 125));  // wet sand
  fill_poly(c.img, side_region(side, n, w, 0), jitter(c.rng, rgb(70, 175, 185), 8));
  fill_poly(c.img, side_region(side, n, w, -shallow), jitter(c.rng, rgb(35, 100, 160), 8));
  polyline(c.img, wave_line(side, n, w, -c.px(1.5)), rgb(240, 245, 245), c.px(2));
  if (c.rng.chance(0.7)) polyline(c.img, wave_line(side, n, w, -shallow * 0.5), rgb(200, 230, 235), 1);
  const bool umbrellas = c.rng.chance(0.5);
  int placed_umbrellas = 0;
  if (umbrellas) {
    const int k = c.rng.randint(3, 10);
    for (int i = 0; i < k; ++i) {
      const double u = c.rng.uniform(0, n);
      const double lo = w(u) + c.px(10), hi = (vegetation ? back(u) : n) - c.px(6);
      if (hi <= lo) continue;
      const P at = from_side(side, n, u, c.rng.uniform(lo, hi));
      disc(c.img, at, c.px(3.5, 1.5), kUmbrellas[c.rng.randint(0, 4)]);
      ++placed_umbrellas;
    }
  }
  const std::string s = side_name(side);
  Captions caps = {
      "a sandy beach along the sea with white waves",
      "turquoise water meets the sand of the beach on the " + s + " side",
      "waves break along the shoreline of a sandy beach",
      "a coastline with a wide strip of light sand on the beach",
      "the sea occupies the " + s + " part of the image, next to a beach",
  };
  if (vegetation)
    caps.push_back("green vegetation grows behind the beach");
  else
    caps.push_back("a wide sandy beach with no vegetation behind it");
  if (placed_umbrellas > 0)
    caps.push_back(count(placed_umbrellas, "colorful umbrella stands", "colorful umbrellas stand") + " on the beach");
  else
    caps.push_back("the beach is empty except for the sand and the sea");
  return caps;
}

Captions desert(Ctx& c) {
  static const std::vector<Named> kSands = {
      {"orange", rgb(205, 150, 95)}, {"pale yellow", rgb(220, 195, 140)}, {"reddish", rgb(185, 115, 80)}};
  const double n = c.n;
  const Named& sand = c.pick(kSands);
  const cv::Scalar base = jitter(c.rng, sand.color, 8);
  c.img.setTo(base);
  texture(c, 6, 16, 4);
  const double wind = c.rng.uniform(0, 2 * kPi);
  const P wd(std::cos(wind), std::sin(wind)), crest(-wd.y, wd.x);
  const int dunes = c.rng.randint(6, 12);
  for (int i = 0; i < dunes; ++i) {
    const P at = c.point(-0.1 * n);
    const double len = n * c.rng.uniform(0.3, 0.9), bow = c.px(c.rng.uniform(8, 25));
    std::vector<P> pts;
    for (int k = 0; k <= 16; ++k) {
      const double t = -0.5 + k / 16.0;
      pts.push_back(at + crest * (t * len) + wd * (bow * (1 - 4 * t * t)));
    }
    polyline(c.img, pts, shade(base, 1.12), c.px(c.rng.uniform(3, 6)));
    for (P& p : pts) p += wd * c.px(3);
    polyline(c.img, pts, shade(base, 0.78), c.px(2.5));
  }
  const bool shrubs = c.rng.chance(0.6), road = c.rng.chance(0.3), rocks = c.rng.chance(0.3);
  if (shrubs) {
    const int k = int(c.rng.randint(5, 25) * c.s * c.s) + 2;
    for (int i = 0; i < k; ++i) {
      const P at = c.point();
      disc(c.img, at, c.px(c.rng.uniform(1.5, 3), 1.0), rgb(95, 95, 55));
    }
  }
  double road_angle = 0;
  if (road) {
    road_angle = c.rng.uniform(0, kPi);
    const Frame f(P(n / 2, n / 2) + c.offset(0.2 * n), road_angle);
    fill_convex(c.img, rect_pts(f, -n, -c.px(3, 1.5), n, c.px(3, 1.5)), shade(base, 0.85));
  }
  if (rocks) {
    const int k = c.rng.randint(3, 8);
    for (int i = 0; i < k; ++i) {
      const P at = c.point();
      const Frame f(at, c.rng.uniform(0, kPi));
      const double a = c.px(c.rng.uniform(2, 5), 1.0);
      fill_convex(c.img, {f(a, 0), f(0.3 * a, 0.8 * a), f(-a, 0.5 * a), f(-0.7 * a, -0.6 * a), f(0.4 * a, -0.8 * a)},
                  rgb(110, 95, 85));
    }
  }
  Captions caps = {
      "a barren desert with rolling sand dunes",
      sand.name + std::string(" sand dunes cover the whole desert"),
      "wind-shaped ridges of sand stretch across the desert",
      "an aerial view of a dry sandy desert",
      "no buildings or water in this desert, only sand",
      shrubs ? "dry desert land with sparse shrubs" : "dry desert land with no vegetation at all",
  };
  if (road) caps.push_back("a dirt road crosses the desert " + orientation(road_angle));
  if (rocks) caps.push_back("scattered dark rocks lie on the desert sand");
  return caps;
}

std::string sentence(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = char(s[0] - 'a' + 'A');
  if (s.empty() || s.back() != '.') s += '.';
  return s;
}

}  // namespace

const std::vector<std::string>& synthetic_scene_classes() {
  static const std::vector<std::string> kNames = {"farmland", "forest",  "lake",          "residential", "airport",
                                                  "harbor",   "highway", "storage_tanks", "beach",       "desert"};
  return kNames;
}

const std::vector<std::string>& synthetic_object_classes() {
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
  scene.label = int(h % synthetic_scene_classes().size());
  Ctx c(size, splitmix64(h), scene);
  Captions caps;
  switch (scene.label) {
    case kFarmland:
      caps = farmland(c);
      break;
    case kForest:
      caps = forest(c);
      break;
    case kLake:
      caps = lake(c);
      break;
    case kResidential:
      caps = residential(c);
      break;
    case kAirport:
      caps = airport(c);
      break;
    case kHarbor:
      caps = harbor(c);
      break;
    case kHighway:
      caps = highway(c);
      break;
    case kStorage:
      caps = storage(c);
      break;
    case kBeach:
      caps = beach(c);
      break;
    default:
      caps = desert(c);
      break;
  }
  grain(c, 2);
  // Distinct candidates in a per-scene random order; caption i is the same for every K > i.
  caps = unique_in_order(caps);
  for (size_t i = caps.size(); i > 1; --i) std::swap(caps[i - 1], caps[size_t(c.rng.randint(0, int(i) - 1))]);
  for (int i = 0; i < captions; ++i) scene.captions.push_back(sentence(caps[size_t(i) % caps.size()]));
  return scene;
}

}  // namespace meridian::data

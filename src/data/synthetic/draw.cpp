#include "draw.h"

#include <opencv2/imgproc.hpp>

namespace meridian::data::synthetic {
namespace {

std::vector<cv::Point> fixed_points(const std::vector<P>& pts, P origin = {0, 0}) {
  std::vector<cv::Point> out;
  out.reserve(pts.size());
  for (const P& p : pts) out.push_back(fixed_point(p, origin));
  return out;
}

// Per-pixel grain in [-amp, amp). amp must be a power of two: OpenCV then fills from raw random bits, about three
// times faster than for other ranges.
cv::Mat grain_noise(Ctx& c, int amp) {
  cv::Mat g(c.img.size(), CV_16SC3);
  c.cvr.fill(g, cv::RNG::UNIFORM, cv::Scalar::all(-amp), cv::Scalar::all(amp));
  return g;
}

}  // namespace

cv::Point fixed_point(P p, P origin) {
  return {int(std::lround((p.x - origin.x - 0.5) * kOne)), int(std::lround((p.y - origin.y - 0.5) * kOne))};
}

std::vector<P> rect_pts(const Frame& f, double x0, double y0, double x1, double y1) {
  return {f(x0, y0), f(x1, y0), f(x1, y1), f(x0, y1)};
}

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

std::vector<P> side_region(int side, double n, const Wave& w, double extra, bool far) {
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
// Objects.

bool place(Ctx& c, const Object& obj, double margin, double min_visible) {
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
// Texture. Both noises come from the scene's own cv::RNG: cv::randu would use the thread's global theRNG() and
// break determinism.

void texture(Ctx& c, int cells, double amp, int grain) {
  cv::Mat low(cells, cells, CV_16S), up, noise;
  c.cvr.fill(low, cv::RNG::UNIFORM, cv::Scalar(-amp), cv::Scalar(amp + 1));
  cv::resize(low, up, c.img.size(), 0, 0, cv::INTER_CUBIC);
  cv::merge(std::vector<cv::Mat>{up, up, up}, noise);
  if (grain > 0) noise += grain_noise(c, grain);
  cv::add(c.img, noise, c.img, cv::noArray(), CV_8U);
}

void grain(Ctx& c, int amp) { cv::add(c.img, grain_noise(c, amp), c.img, cv::noArray(), CV_8U); }

}  // namespace meridian::data::synthetic

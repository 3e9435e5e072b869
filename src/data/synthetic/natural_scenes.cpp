// Scenes of landscapes: farmland, forest, lake, beach, desert (see scenes.h).
#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "scenes.h"

namespace meridian::data::synthetic {

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

}  // namespace meridian::data::synthetic

// Scenes built around their objects: residential, airport, harbor, highway, storage tanks (see scenes.h).
#include <algorithm>
#include <cmath>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "scenes.h"

namespace meridian::data::synthetic {

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

}  // namespace meridian::data::synthetic

// The scene kinds of the synthetic dataset (private to meridian_synthetic). Each draws one scene into c.img
// (objects through place(), so that c.out gets their boxes) from c's random sources only, and returns its candidate
// captions, every one of which names the scene (field, forest, lake, ...) so that each caption is informative about
// the class. A scene kind has at least 6 distinct candidates. make_synthetic_scene lists them in label order.
#pragma once

#include "captions.h"
#include "draw.h"

namespace meridian::data::synthetic {

// natural_scenes.cpp: landscapes.
Captions farmland(Ctx& c);  // parallel strips of crop fields, sometimes a farm (buildings)
Captions forest(Ctx& c);    // tree crowns, sometimes a clearing, a path, autumn colours
Captions lake(Ctx& c);      // rippled water, sometimes a shore and an island
Captions beach(Ctx& c);     // sand, surf and sea along one side, sometimes vegetation and umbrellas
Captions desert(Ctx& c);    // dunes, sometimes shrubs, a dirt road, rocks

// built_scenes.cpp: places built around their objects.
Captions residential(Ctx& c);  // a street grid with houses (buildings) and cars (vehicles)
Captions airport(Ctx& c);      // a runway, an apron with planes, sometimes a terminal (building)
Captions harbor(Ctx& c);       // a quay with piers, ships (docked and sailing) and warehouses (buildings)
Captions highway(Ctx& c);      // a multi-lane road through fields with cars and trucks (vehicles)
Captions storage(Ctx& c);      // a tank farm: storage tanks in a grid behind an earth wall

}  // namespace meridian::data::synthetic

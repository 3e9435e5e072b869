// The caption language of the synthetic scenes (private to meridian_synthetic): counts in words, lists,
// directions and regions of the image, and sentence case. Pure functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include "draw.h"

namespace meridian::data::synthetic {

// A scene's candidate captions, lower case without the final period (sentence() adds both).
using Captions = std::vector<std::string>;

// `k` in words: "no", "one" .. "twelve", then digits.
std::string num(int k);

// "<num(k)> <one or many>": count(1, "ship", "ships") == "one ship".
std::string count(int k, const std::string& one, const std::string& many);

// "there is <count> <rest>" for k == 1, else "there are <count> <rest>".
std::string there_are(int k, const std::string& one, const std::string& many, const std::string& rest);

// "a", "a and b", "a, b and c".
std::string join(const std::vector<std::string>& words);

// Direction of a line at `angle` (radians, y down): "horizontally", "vertically" or one of the two diagonals.
std::string orientation(double angle);

// Where `p` lies in a 3 x 3 grid over the image of size n: "in the upper left", "at the top", "in the center", ...
std::string region(P p, int n);

// Centre of the boxes of class `cls` drawn so far (image centre when there are none).
P centroid(const Ctx& c, int cls);

// The most frequent name (first seen wins ties); "" for none.
std::string majority(const std::vector<std::string>& names);

// The names without repeats, in order of first appearance.
std::vector<std::string> unique_in_order(const std::vector<std::string>& names);

// `s` with its first letter upper case and ending with '.'.
std::string sentence(std::string s);

}  // namespace meridian::data::synthetic

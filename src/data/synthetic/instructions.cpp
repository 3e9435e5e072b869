#include <algorithm>
#include <vector>

#include "meridian/core/hash.h"
#include "meridian/data/synthetic_text.h"

namespace meridian::data {

SyntheticInstruction make_synthetic_instruction(uint64_t seed, int64_t index) {
  uint64_t s = splitmix64(seed ^ splitmix64(uint64_t(index)));
  const auto pick = [&](int n) { return int(next_unit(s) * n); };
  static const char* kWords[] = {"river", "forest", "harbor", "runway", "field", "bridge", "tower", "lake",
                                 "road",  "plane",  "ship",   "tank",   "roof",  "beach",  "sand",  "crop"};
  SyntheticInstruction r;
  switch (pick(3)) {
    case 0: {
      const int a = pick(100), b = pick(100), op = pick(3);
      const char* sym[] = {"+", "-", "*"};
      const int v = op == 0 ? a + b : op == 1 ? a - b : a * b;
      r.instruction = "Compute the result.";
      r.input = std::to_string(a) + " " + sym[op] + " " + std::to_string(b);
      r.output = std::to_string(a) + " " + sym[op] + " " + std::to_string(b) + " = " + std::to_string(v);
      break;
    }
    case 1: {
      std::vector<std::string> words;
      for (int k = 0, n = 3 + pick(4); k < n; ++k) words.push_back(kWords[pick(16)]);
      std::string in, out;
      for (size_t k = 0; k < words.size(); ++k) in += (k ? " " : "") + words[k];
      for (size_t k = words.size(); k-- > 0;) out += words[k] + (k ? " " : "");
      r.instruction = "Reverse the order of the words.";
      r.input = in;
      r.output = out;
      break;
    }
    default: {
      const std::string w = kWords[pick(16)];
      const char letter = w[size_t(pick(int(w.size())))];
      const auto n = std::count(w.begin(), w.end(), letter);
      r.instruction = std::string("How many times does the letter '") + letter + "' appear in the word?";
      r.input = w;
      r.output = std::string("The letter '") + letter + "' appears " + std::to_string(n) +
                 (n == 1 ? " time" : " times") + " in \"" + w + "\".";
    }
  }
  return r;
}

}  // namespace meridian::data

#include <algorithm>
#include <string>
#include <vector>

#include "meridian/core/error.h"
#include "meridian/data/synthetic.h"
#include "meridian/data/synthetic_prep.h"
#include "meridian/data/synthetic_text.h"

namespace meridian::data {

namespace {

void check_synthetic(const PrepSyntheticOptions& o) {
  if (o.count < 1) throw UserError("--count: must be at least 1");
  if (o.size < 32) throw UserError("--size: synthetic scenes need at least 32 pixels, got " + std::to_string(o.size));
}

std::string source_of(const PrepSyntheticOptions& o) { return "synthetic/" + std::to_string(o.seed); }

GeneratedImage scene_row(const PrepSyntheticOptions& o, int64_t i, int captions) {
  auto scene = make_synthetic_scene(o.seed, i, o.size, captions);
  GeneratedImage d;
  d.image = scene.image;
  d.name = source_of(o) + "/" + std::to_string(i);
  d.captions = std::move(scene.captions);
  d.label = scene.label;
  d.boxes = std::move(scene.boxes);
  d.box_classes.assign(scene.box_classes.begin(), scene.box_classes.end());
  return d;
}

TextRecord text_record(uint64_t seed, int64_t index) {
  const auto r = make_synthetic_instruction(seed, index);
  return {{{alpaca_prompt(r.instruction, r.input), r.output}}};
}

}  // namespace

PrepReport prep_synthetic_image_text(const comm::Runtime& rt, const PrepSyntheticOptions& o) {
  check_synthetic(o);
  ImageGenerator g;
  g.count = o.count;
  g.source = source_of(o);
  g.class_names = synthetic_scene_classes();
  g.tokenizer_corpus = [&] {  // the captions of the first 2,000 scenes (drawn small: only their text is used)
    std::vector<std::string> corpus;
    for (int64_t i = 0; i < std::min<int64_t>(o.count, 2000); ++i)
      for (auto& c : make_synthetic_scene(o.seed, i, 32, o.captions_per_image).captions) corpus.push_back(c);
    return corpus;
  };
  g.make = [&](int64_t i) {
    GeneratedImage d = scene_row(o, i, o.captions_per_image);
    d.boxes.clear(), d.box_classes.clear();
    return d;
  };
  return prep_generated_images(rt, o, g);
}

PrepReport prep_synthetic_detection(const comm::Runtime& rt, const PrepSyntheticOptions& o) {
  check_synthetic(o);
  ImageGenerator g;
  g.kind = "detection";
  g.count = o.count;
  g.source = source_of(o);
  g.class_names = synthetic_object_classes();
  g.make = [&](int64_t i) {
    GeneratedImage d = scene_row(o, i, 1);
    d.captions.clear(), d.label = -1;
    return d;
  };
  return prep_generated_images(rt, o, g);
}

PrepReport prep_synthetic_text(const comm::Runtime& rt, const PrepSyntheticOptions& o) {
  if (o.count < 1) throw UserError("--count: must be at least 1");
  TextGenerator g;
  g.count = o.count;
  g.source = source_of(o);
  g.make = [&](int64_t i) { return text_record(o.seed, i); };
  g.tokenizer_corpus = [&] {
    std::vector<std::string> corpus;
    for (int64_t i = 0; i < std::min<int64_t>(o.count, 5000); ++i) {
      const auto r = text_record(o.seed, i);
      corpus.push_back(r.exchanges[0].prompt);
      corpus.push_back(r.exchanges[0].response);
    }
    return corpus;
  };
  return prep_generated_text(rt, o, g);
}

}  // namespace meridian::data

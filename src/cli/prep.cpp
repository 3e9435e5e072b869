// `meridian prep image-text` and `meridian prep synthetic`: build a dataset file (docs/formats.md).
#include "meridian/data/prep.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/synthetic_prep.h"

namespace meridian::cli {

namespace {

// Each kind lists only the options it reads: the output (every kind), images (image-text, detection),
// captions (image-text), a tokenizer (image-text, text) and a holdout (image-text, detection, text).
// prep synthetic makes every kind: all of them but the holdout (its --seed picks the scenes).
void add_output(cxxopts::Options& o) {
  // clang-format off
  o.add_options("output")
      ("out", "Output dataset file (.h5); written as <out>.tmp and renamed when complete", cxxopts::value<std::string>()->default_value(""))
      ("overwrite", "Replace an existing output file")
      ("block", "Inputs per rank per collective write", cxxopts::value<int>()->default_value("32"));
  // clang-format on
}

void add_images(cxxopts::Options& o, const std::string& size_help) {
  // clang-format off
  o.add_options("images")
      ("size", size_help, cxxopts::value<int>()->default_value("256"))
      ("encode", "Image storage: raw (pixels) or jpeg (a JPEG per image, the input's own bytes when they already are the stored image)", cxxopts::value<std::string>()->default_value("raw"))
      ("quality", "JPEG quality of re-encoded images (--encode jpeg)", cxxopts::value<int>()->default_value("90"))
      ("reencode", "With --encode jpeg: encode every image at --quality, also input JPEGs that could be kept as they are")
      ("part-size", "With --out NAME.json (a dataset of many files): inputs per file NAME-00000.h5, ...", cxxopts::value<int64_t>()->default_value("100000"))
      ("resume", "Finish an interrupted prep of NAME.json: the same inputs, after its last finished file")
      ("append", "Add these inputs to the finished NAME.json as more files (its tokenizer is kept)");
  // clang-format on
}

void add_captions(cxxopts::Options& o) {
  // clang-format off
  o.add_options("captions")
      ("captions-per-image", "Captions stored per image (extra dropped, missing ones repeated)", cxxopts::value<int>()->default_value("5"))
      ("context-length", "Tokens per caption, eos included", cxxopts::value<int>()->default_value("64"));
  // clang-format on
}

void add_tokenizer(cxxopts::Options& o) {
  // clang-format off
  o.add_options("tokenizer")
      ("tokenizer", "SentencePiece .model, a Hugging Face model directory (SigLIP: spiece.model with tokenizer_config.json's rules, lower-case, punctuation removed, its eos and pad; Llama: tokenizer.model, the text as is, its bos and eos), or a dataset .h5 whose tokenizer to reuse (e.g. the train split's for the test split); default: train one", cxxopts::value<std::string>()->default_value(""))
      ("vocab-size", "Vocabulary size (upper bound) of a trained tokenizer", cxxopts::value<int>()->default_value("8000"));
  // clang-format on
}

// A validation split where the data has none (text, image-text, detection): `records` says what is
// held out, `inputs` from which inputs; `tokenizer`: the kind has one.
void add_holdout(cxxopts::Options& o, const std::string& records, const std::string& inputs, bool tokenizer) {
  const std::string shared = tokenizer ? ", with one tokenizer (a trained one learns from --out's only)" : "";
  // clang-format off
  o.add_options("holdout")
      ("holdout", "Hold out " + records + inputs + " for validation: N (that many) or a fraction 0 < F < 1 (round(F x count), at least 1), of those --split keeps; they go to --holdout-out, the rest to --out" + shared, cxxopts::value<std::string>()->default_value(""))
      ("holdout-out", "The held-out dataset file (.h5), required with --holdout; it and --out are renamed from .tmp together, once both are complete", cxxopts::value<std::string>()->default_value(""))
      ("seed", "Which " + records + " --holdout takes: the same seed and inputs give the same files, on every rank and every run", cxxopts::value<uint64_t>()->default_value("0"));
  // clang-format on
}

const char* kCropSize = "Image size: shorter side resized to it, then center-cropped to size x size";
const char* kLetterboxSize =
    "Image size: longer side resized to it, then padded (gray 114, centred) to size x size: no box is cut";

// The options this kind declared; the others keep PrepCommon's defaults (the same as the options').
void fill_common(const cxxopts::ParseResult& p, data::PrepCommon& c) {
  const auto given = [&](const char* name) { return p.count(name) > 0; };
  c.out = p["out"].as<std::string>();
  c.overwrite = given("overwrite");
  c.block = p["block"].as<int>();
  if (given("size")) c.size = p["size"].as<int>();
  if (given("captions-per-image")) c.captions_per_image = p["captions-per-image"].as<int>();
  if (given("context-length")) c.context_length = p["context-length"].as<int>();
  if (given("tokenizer")) c.tokenizer = p["tokenizer"].as<std::string>();
  if (given("vocab-size")) c.vocab_size = p["vocab-size"].as<int>();
  if (given("encode")) c.encode = p["encode"].as<std::string>();
  if (given("quality")) c.quality = p["quality"].as<int>();
  c.reencode = given("reencode");
  if (given("part-size")) c.part_size = p["part-size"].as<int64_t>();
  c.resume = given("resume");
  c.append = given("append");
}

void fill_holdout(const cxxopts::ParseResult& p, data::PrepCommon& c) {
  c.holdout = p["holdout"].as<std::string>();
  c.holdout_out = p["holdout-out"].as<std::string>();
  c.holdout_seed = p["seed"].as<uint64_t>();
  if (p.count("seed") && c.holdout.empty())
    throw UserError("--seed: only with --holdout (it picks the held-out records)");
}

std::vector<int> parse_bands(const std::string& text) {
  std::vector<int> bands;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t pos = 0;
      bands.push_back(std::stoi(item, &pos));
      if (pos != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw UserError("--bands: '" + text + "' is not a comma-separated list of band numbers (e.g. 3,2,1)");
    }
  }
  return bands;
}

// `holdout_out`: where r.holdout's file went (--holdout).
int report(const comm::Runtime& rt, const data::PrepReport& r, const std::string& out,
           const std::string& holdout_out = "") {
  if (rt.rank() == 0) {
    std::printf("prep: wrote %s: %lld of %lld inputs in %.1f s (%.1f inputs/s), %lld skipped", out.c_str(),
                (long long)r.written, (long long)r.inputs, r.seconds, r.written / std::max(r.seconds, 1e-9),
                (long long)r.skipped_count);
    if (r.boxes) std::printf(", %lld boxes", (long long)r.boxes);
    if (r.tokens) std::printf(", %lld tokens", (long long)r.tokens);
    if (r.files > 1) std::printf(", in %lld files", (long long)r.files);
    std::printf("\n");
    if (r.image_bytes && r.written)
      std::printf("  images: %.1f KB each on average%s\n", r.image_bytes / 1e3 / r.written,
                  r.kept_source_bytes ? (", " + std::to_string(r.kept_source_bytes) +
                                         " kept as their input JPEG's bytes (not re-encoded)")
                                            .c_str()
                                      : "");
    for (const auto& w : r.warnings) std::printf("  WARNING: %s\n", w.c_str());
    if (!r.skipped.empty()) {
      const std::string list = out + ".skipped.txt";
      std::ofstream f(list);
      for (const auto& s : r.skipped) f << s << "\n";
      for (size_t i = 0; i < std::min<size_t>(r.skipped.size(), 10); ++i)
        std::printf("  skipped %s\n", r.skipped[i].c_str());
      std::printf("  full list of skipped inputs: %s\n", list.c_str());
    }
  }
  if (r.holdout) report(rt, *r.holdout, holdout_out);
  return 0;
}

}  // namespace

Command prep_image_text_command() {
  Command c;
  c.name = "prep image-text";
  c.summary = "Images + captions (.jsonl/.csv) -> one image-text dataset file (run under mpirun)";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("images", "Directory the image paths in the captions file are relative to", cxxopts::value<std::string>()->default_value(""))
        ("captions", "Captions file: .jsonl ({\"image\", \"captions\": [...], \"class\", \"split\"}), .csv (image,caption[,class,split]), or Karpathy-style dataset_*.json (UCM-captions, RSICD, RSITMD)", cxxopts::value<std::string>()->default_value(""))
        ("class-folders", "Instead of --captions: images in --images/<class>/ (AID, NWPU-RESISC45, UCM), labelled by folder, captioned with the class name in words (BareLand, bare_land: \"bare land\"), for zero-shot evaluation")
        ("class-names", "With --class-folders: a YAML map of folder to class name that overrides the names made from the folders, e.g. {Airport: airport terminal, BareLand: bare soil}", cxxopts::value<std::string>()->default_value(""))
        ("split", "Keep only entries of this split (e.g. train); default: all", cxxopts::value<std::string>()->default_value(""))
        ("webdataset", "Instead of --images/--captions: webdataset tar shards, e.g. 'shards/{00000..00099}.tar' (key.jpg + key.txt or key.json), divided among the ranks by shard; with --out NAME.json, --part-size counts shards", cxxopts::value<std::string>()->default_value(""))
        ("bands", "Bands (1-based) to use as R,G,B for multi-band images, e.g. 3,2,1", cxxopts::value<std::string>()->default_value(""))
        ("strict", "An unreadable image is an error instead of being skipped and reported");
    // clang-format on
    add_output(o);
    add_images(o, kCropSize);
    add_captions(o);
    add_tokenizer(o);
    add_holdout(o, "entries", "", true);
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    data::PrepImageTextOptions o;
    fill_common(p, o);
    fill_holdout(p, o);
    o.images_dir = p["images"].as<std::string>();
    o.captions_file = p["captions"].as<std::string>();
    o.webdataset = p["webdataset"].as<std::string>();
    o.split = p["split"].as<std::string>();
    o.class_folders = p.count("class-folders") > 0;
    o.class_names_file = p["class-names"].as<std::string>();
    if (!p["bands"].as<std::string>().empty()) o.bands = parse_bands(p["bands"].as<std::string>());
    o.strict = p.count("strict") > 0;
    return report(rt, data::prep_image_text(rt, o), o.out, o.holdout_out);
  };
  return c;
}

Command prep_detection_command() {
  Command c;
  c.name = "prep detection";
  c.summary = "Images + YOLO labels or a COCO file -> one detection dataset (letterboxed; run under mpirun)";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("images", "Image directory (every image under it for YOLO; the file names' root for COCO)", cxxopts::value<std::string>()->default_value(""))
        ("labels", "YOLO label directory: <labels>/<image path>.txt with 'class cx cy w h' (normalised) per line", cxxopts::value<std::string>()->default_value(""))
        ("coco", "COCO instances JSON (instead of --labels)", cxxopts::value<std::string>()->default_value(""))
        ("class-names", "YOLO: file with one class name per line (default: 0..C-1)", cxxopts::value<std::string>()->default_value(""))
        ("data-yaml", "Ultralytics' data.yaml (path, train, val, test, names) instead of --images/--labels/--class-names", cxxopts::value<std::string>()->default_value(""))
        ("split", "With --data-yaml: which split to write (train, val or test)", cxxopts::value<std::string>()->default_value("train"))
        ("bands", "Bands (1-based) to use as R,G,B for multi-band images, e.g. 3,2,1", cxxopts::value<std::string>()->default_value(""))
        ("strict", "An unreadable image, or a label that is malformed or off its image, is an error instead of being skipped and reported");
    // clang-format on
    add_output(o);
    add_images(o, kLetterboxSize);
    add_holdout(o, "images", " (of any input: YOLO, COCO, or a data.yaml without a val split: --split train)", false);
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    data::PrepDetectionOptions o;
    fill_common(p, o);
    fill_holdout(p, o);
    o.images_dir = p["images"].as<std::string>();
    o.labels_dir = p["labels"].as<std::string>();
    o.coco = p["coco"].as<std::string>();
    o.class_names_file = p["class-names"].as<std::string>();
    o.data_yaml = p["data-yaml"].as<std::string>();
    o.split = p["split"].as<std::string>();
    if (o.split != "train" && o.split != "val" && o.split != "test")
      throw UserError("--split: '" + o.split + "' is not train, val or test");
    if (!p["bands"].as<std::string>().empty()) o.bands = parse_bands(p["bands"].as<std::string>());
    o.strict = p.count("strict") > 0;
    return report(rt, data::prep_detection(rt, o), o.out, o.holdout_out);
  };
  return c;
}

Command prep_text_command() {
  Command c;
  c.name = "prep text";
  c.summary = "Instruction (Alpaca), chat or plain-text records -> one token dataset with loss masks";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("jsonl", "Records, as JSON Lines or one JSON array (Alpaca's alpaca_data.json): {\"instruction\", \"input\"?, \"output\"} (loss on the response), {\"messages\": [{\"role\", \"content\"}]} (loss on the assistant turns) or {\"text\"}", cxxopts::value<std::string>()->default_value(""))
        ("chat-template", "How {\"messages\"} records become text: llama-2 ([INST], <<SYS>>, bos/eos around each exchange) or mistral ([INST], one bos, eos after each answer, no system)", cxxopts::value<std::string>()->default_value("llama-2"))
        ("split", "Keep only records whose \"split\" is this; default: all", cxxopts::value<std::string>()->default_value(""));
    // clang-format on
    add_output(o);
    add_tokenizer(o);
    add_holdout(o, "records", "", true);
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    data::PrepTextOptions o;
    fill_common(p, o);
    fill_holdout(p, o);
    o.jsonl = p["jsonl"].as<std::string>();
    o.split = p["split"].as<std::string>();
    o.chat_template = p["chat-template"].as<std::string>();
    return report(rt, data::prep_text(rt, o), o.out, o.holdout_out);
  };
  return c;
}

Command prep_synthetic_command() {
  Command c;
  c.name = "prep synthetic";
  c.summary = "Procedurally drawn aerial-like scenes with captions -> a dataset (tests, demos)";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("kind", "What to make: image-text (scenes with captions), detection (objects with exact boxes) or text (instruction records)", cxxopts::value<std::string>()->default_value("image-text"))
        ("count", "Number of scenes", cxxopts::value<int64_t>()->default_value("1000"))
        ("seed", "Seed: the same seed gives the same file", cxxopts::value<uint64_t>()->default_value("0"));
    // clang-format on
    add_output(o);
    add_images(o, "Image size: each scene is drawn at size x size");
    add_captions(o);
    add_tokenizer(o);
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const std::string kind = p["kind"].as<std::string>();
    if (kind != "image-text" && kind != "detection" && kind != "text")
      throw UserError("--kind: '" + kind + "' is not one of image-text, detection, text");
    data::PrepSyntheticOptions o;
    fill_common(p, o);
    o.count = p["count"].as<int64_t>();
    o.seed = p["seed"].as<uint64_t>();
    if (kind == "text") return report(rt, data::prep_synthetic_text(rt, o), o.out);
    return report(rt,
                  kind == "detection" ? data::prep_synthetic_detection(rt, o) : data::prep_synthetic_image_text(rt, o),
                  o.out);
  };
  return c;
}

}  // namespace meridian::cli

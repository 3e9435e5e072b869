// `meridian prep`'s entry points: options checked, inputs read (every rank reads the index and
// keeps only its own entries), then one of the write drivers of prep_job.h.
#include "meridian/data/prep.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "captions_reader.h"
#include "coco_reader.h"
#include "collective_writer.h"
#include "dataset_index.h"
#include "image_decode.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"
#include "meridian/data/format.h"
#include "meridian/data/image_input.h"
#include "meridian/data/tokenizer.h"
#include "prep_job.h"
#include "text_lines.h"
#include "text_records_reader.h"
#include "webdataset.h"
#include "yolo_reader.h"

namespace fs = std::filesystem;

namespace meridian::data {

namespace {

void check_options(const PrepCommon& o) {
  if (o.out.empty()) throw UserError("--out: required");
  if (o.size < 8 || o.size > 8192) throw UserError("--size: must be between 8 and 8192, got " + std::to_string(o.size));
  if (o.captions_per_image < 1) throw UserError("--captions-per-image: must be at least 1");
  if (o.context_length < 2) throw UserError("--context-length: must be at least 2");
  if (o.block < 1) throw UserError("--block: must be at least 1");
  if (o.encode != "raw" && o.encode != "jpeg")
    throw UserError("--encode: expected raw or jpeg, got '" + o.encode + "'");
  if (o.quality < 1 || o.quality > 100)
    throw UserError("--quality: must be between 1 and 100, got " + std::to_string(o.quality));
  if (o.part_size < 1) throw UserError("--part-size: must be at least 1");
  if ((o.resume || o.append) && !is_index_path(o.out))
    throw UserError(std::string(o.resume ? "--resume" : "--append") +
                    ": only for a dataset of many files (--out NAME.json), not " + o.out);
  if (o.holdout.empty()) {
    if (!o.holdout_out.empty()) throw UserError("--holdout-out: only with --holdout");
    return;
  }
  check_holdout_value(o.holdout);
  if (o.holdout_out.empty()) throw UserError("--holdout-out: required with --holdout (the held-out records' .h5 file)");
  if (is_index_path(o.out) || is_index_path(o.holdout_out))
    throw UserError("--holdout: writes two .h5 files, not a dataset of many files (" +
                    (is_index_path(o.out) ? o.out : o.holdout_out) + ")");
  if (fs::weakly_canonical(fs::absolute(o.out)) == fs::weakly_canonical(fs::absolute(o.holdout_out)))
    throw UserError("--holdout-out: " + o.holdout_out +
                    " is also --out; the held-out records need a file of their own");
}

// --holdout: the rows of file `held` (of `plan`) as a job of its own, decoding the same inputs.
ImageJob holdout_part(const ImageJob& job, const HoldoutPlan& plan, bool held) {
  ImageJob part = job;
  const std::vector<int64_t>& inputs = plan.inputs(held);
  part.count = int64_t(inputs.size());
  part.decode = [&job, &inputs](int64_t i) { return job.decode(inputs[size_t(i)]); };
  part.inputs = job.inputs + (held ? " (held out)" : " (not held out)");
  return part;
}

// Text datasets are one file.
void check_text_options(const PrepCommon& o) {
  check_options(o);
  if (o.encode != "raw") throw UserError("--encode: a text dataset has no images to encode");
  if (is_index_path(o.out)) throw UserError("--out: a text dataset is one .h5 file, not " + o.out);
}

void check_inputs(const std::string& images_dir, const std::vector<int>& bands) {
  if (images_dir.empty() || !fs::is_directory(images_dir))
    throw UserError("--images: '" + images_dir + "' is not a directory");
  if (!bands.empty() && bands.size() != 3) throw UserError("--bands: give exactly three band numbers, e.g. 3,2,1");
}

// At most this many captions train a tokenizer (rank 0 holds them and SentencePiece's trainer works
// on them: 500,000 captions took 0.8 GB on rank 0, 125,000 about 0.2 GB).
constexpr size_t kTokenizerCaptions = 200000;

// prep image-text --webdataset: a unit per shard, its samples streamed (webdataset.h).
PrepReport prep_webdataset(const comm::Runtime& rt, const PrepImageTextOptions& o) {
  if (!o.images_dir.empty() || !o.captions_file.empty())
    throw UserError("--webdataset: the shards hold images and captions; give no --images or --captions");
  if (!o.split.empty()) throw UserError("--split: webdataset shards have no splits (make a set of shards per split)");
  if (!o.bands.empty()) throw UserError("--bands: not supported with --webdataset");
  if (!o.holdout.empty())
    throw UserError("--holdout: not with --webdataset (its samples are not listed before they are read)");
  const std::vector<std::string> shards = expand_shards(o.webdataset);
  for (const auto& shard : shards)
    if (!fs::is_regular_file(shard)) throw UserError("--webdataset: " + shard + " does not exist");
  ImageJob job;
  job.count = int64_t(shards.size());
  job.inputs = job.source = o.webdataset;
  job.strict = o.strict;
  job.tokenizer_corpus = [&] {  // the captions of the first shards, their images skipped unread
    std::vector<std::string> corpus;
    for (size_t i = 0; i < shards.size() && corpus.size() < kTokenizerCaptions; ++i) {
      try {
        ShardReader reader(shards[i], /*text_only=*/true);
        WdsSample sample;
        while (corpus.size() < kTokenizerCaptions && reader.next(sample))
          for (auto& c : sample_captions(sample)) corpus.push_back(std::move(c));
      } catch (const SkipImage&) {  // a damaged shard: its samples are reported when it is read
      }
    }
    return corpus;
  };
  job.open_unit = [&](int64_t unit) {
    auto reader = std::make_shared<std::unique_ptr<ShardReader>>();
    auto opened = std::make_shared<bool>(false);
    return std::function<bool(Decoded&)>([&, unit, reader, opened](Decoded& d) {
      if (!*opened) {
        *opened = true;
        *reader = std::make_unique<ShardReader>(shards[unit]);  // SkipImage: reported, the shard is done
      }
      WdsSample sample;
      if (!*reader || !(*reader)->next(sample)) return false;
      d.name = shards[unit] + "/" + sample.key;
      const std::string ext = image_member(sample);
      if (ext.empty()) throw SkipImage{d.name + ": no image member (.jpg, .png, .webp, .tif or .bmp)"};
      d.captions = sample_captions(sample);
      if (d.captions.empty()) throw SkipImage{d.name + ": no caption (.txt, or .json with \"caption\")"};
      d.image = resize_crop(decode_rgb(sample.members[ext], d.name + "." + ext), o.size);
      if (ext == "jpg" || ext == "jpeg") d.source_bytes = std::move(sample.members[ext]);
      return true;
    });
  };
  return run_image_job(rt, o, job);
}

}  // namespace

namespace {
// --class-names: the YAML map of class folder to class name ("": none given).
std::map<std::string, std::string> folder_class_names(const std::string& file, const std::string& dir) {
  std::map<std::string, std::string> names;
  if (file.empty()) return names;
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::Exception& e) {
    throw DataError(file, "--class-names", std::string("is not readable YAML: ") + e.what());
  }
  if (!root.IsMap()) throw DataError(file, "--class-names", "expected a map of class folder to class name");
  for (const auto& kv : root) {
    const std::string folder = kv.first.as<std::string>(), name = kv.second.IsScalar() ? kv.second.Scalar() : "";
    if (!fs::is_directory(fs::path(dir) / folder)) throw DataError(file, folder, "names no class folder of " + dir);
    if (name.find_first_not_of(" \t") == std::string::npos) throw DataError(file, folder, "an empty class name");
    names[folder] = name;
  }
  return names;
}
}  // namespace

PrepReport prep_image_text(const comm::Runtime& rt, const PrepImageTextOptions& o) {
  check_options(o);
  if (!o.webdataset.empty()) return prep_webdataset(rt, o);
  check_inputs(o.images_dir, o.bands);
  if (o.class_folders != o.captions_file.empty())
    throw UserError(o.class_folders ? "--class-folders: the classes come from the folders; give no --captions"
                                    : "--captions: required (or --class-folders for DIR/<class>/*.jpg)");
  // --class-folders: every image under DIR/<class>/, the class its folder, its caption the class name.
  std::vector<CaptionEntry> folder_entries;
  if (!o.class_names_file.empty() && !o.class_folders)
    throw UserError("--class-names: names class folders; give --class-folders too");
  if (o.class_folders) {
    const std::map<std::string, std::string> renamed = folder_class_names(o.class_names_file, o.images_dir);
    for (const auto& name : list_images(o.images_dir, o.out)) {
      const auto parts = fs::path(name);
      if (parts.parent_path().empty())
        throw DataError((fs::path(o.images_dir) / name).string(), "--class-folders",
                        "an image outside a class folder (expected DIR/<class>/<image>)");
      CaptionEntry e;
      e.image = name;
      e.cls = parts.begin()->string();
      if (const auto it = renamed.find(e.cls); it != renamed.end()) e.cls = it->second;
      e.captions.push_back(class_words(e.cls));
      folder_entries.push_back(std::move(e));
    }
    if (folder_entries.empty()) throw UserError("--images: no image files under " + o.images_dir);
    // A folder without images is no class: zero-shot then scores over fewer classes than the user has.
    std::set<std::string> with_images;
    for (const auto& e : folder_entries) with_images.insert(fs::path(e.image).begin()->string());
    std::vector<std::string> empty;
    for (const auto& d : fs::directory_iterator(o.images_dir)) {
      const std::string name = d.path().filename().string();
      if (d.is_directory() && name[0] != '.' && !with_images.count(name)) empty.push_back(name);
    }
    std::sort(empty.begin(), empty.end());
    if (!empty.empty() && rt.rank() == 0)
      spdlog::warn(
          "--class-folders: {} folder(s) of {} without images, left out of the classes (zero-shot scores "
          "over the {} classes with images): {}",
          empty.size(), o.images_dir, with_images.size(), fmt::join(empty, ", "));
  }
  const auto visit_entries = [&](const std::function<void(CaptionEntry &&)>& visit) {
    if (!o.class_folders) return read_captions(o.captions_file, visit);
    for (CaptionEntry e : folder_entries) visit(std::move(e));
  };
  // Every rank counts the entries and collects the class names (of all entries of every split, so
  // labels agree between split files); rank 0 keeps a bounded sample of captions for the tokenizer.
  // The entries themselves are read again, forward, as the rounds reach them (CaptionCursor): memory
  // stays flat however long the captions file is.
  std::set<std::string> classes, splits;
  std::vector<std::string> corpus;
  const std::string inputs = o.class_folders ? o.images_dir + " (class folders)" : o.captions_file;
  // --holdout: the entries are counted first, so that a trained tokenizer learns from --out's only.
  std::optional<HoldoutPlan> plan;
  if (!o.holdout.empty()) {
    int64_t count = 0;
    visit_entries([&](CaptionEntry&& e) {
      splits.insert(e.split);
      count += o.split.empty() || e.split == o.split;
    });
    check_same_inputs(rt, count, {});
    plan.emplace(o, count, inputs + split_note(o.split, splits));
  }
  int64_t count = 0;
  uint64_t seen = 0;  // captions offered to the tokenizer's sample
  visit_entries([&](CaptionEntry&& e) {
    if (!e.cls.empty()) classes.insert(e.cls);
    splits.insert(e.split);
    if (!o.split.empty() && e.split != o.split) return;
    // A uniform sample of all captions (reservoir, fixed seed) of the entries not held out.
    if (rt.rank() == 0 && o.tokenizer.empty() && !(plan && plan->held(count)))
      for (auto& c : e.captions) {
        ++seen;
        if (corpus.size() < kTokenizerCaptions) {
          corpus.push_back(std::move(c));
        } else if (const uint64_t k = splitmix64(seen) % seen; k < kTokenizerCaptions) {
          corpus[k] = std::move(c);
        }
      }
    ++count;
  });
  std::optional<CaptionCursor> cursor;
  if (!o.class_folders) cursor.emplace(o.captions_file, o.split);
  std::vector<const CaptionEntry*> kept;  // --class-folders: the entries of the split (all: none has one)
  for (const auto& e : folder_entries)
    if (o.split.empty() || e.split == o.split) kept.push_back(&e);
  ImageJob job;
  job.count = count;
  job.class_names.assign(classes.begin(), classes.end());
  job.split = o.split;
  job.inputs = inputs + split_note(o.split, splits);
  job.source = inputs + (o.split.empty() ? "" : " split " + o.split);
  job.strict = o.strict;
  job.tokenizer_corpus = [&] { return corpus; };
  job.decode = [&](int64_t i) {
    const CaptionEntry& e = cursor ? cursor->at(i) : *kept[size_t(i)];
    Decoded d;
    d.name = e.image;
    d.source = (fs::path(o.images_dir) / e.image).string();
    d.image = resize_crop(load_rgb(o.images_dir, e.image, o.bands), o.size);
    d.captions = e.captions;
    if (!e.cls.empty())
      d.label =
          int32_t(std::lower_bound(job.class_names.begin(), job.class_names.end(), e.cls) - job.class_names.begin());
    return d;
  };
  if (!plan) return run_image_job(rt, o, job);
  if (const std::string e =
          agree_error(rt, count == plan->records() ? "" : "prep: " + job.inputs + " changed while read");
      !e.empty())
    throw UserError(e);
  return write_with_holdout(
      rt, o, [&] { return std::make_unique<Tokenizer>(shared_tokenizer(rt, o, job.tokenizer_corpus, false)); },
      [&](const PrepCommon& file, bool held, const Tokenizer* tok) {
        if (cursor && held) cursor.emplace(o.captions_file, o.split);  // read forward again from the start
        return run_image_job(rt, file, holdout_part(job, *plan, held), tok);
      });
}

PrepReport prep_detection(const comm::Runtime& rt, const PrepDetectionOptions& given) {
  PrepDetectionOptions o = given;
  std::vector<std::string> data_yaml_names;
  if (!o.data_yaml.empty()) {  // Ultralytics' description: one split's images, labels and names
    if (!o.images_dir.empty() || !o.labels_dir.empty() || !o.coco.empty() || !o.class_names_file.empty())
      throw UserError(
          "prep detection: --data-yaml names the images, labels and classes: not with --images, "
          "--labels, --coco or --class-names");
    YoloSplit split = read_data_yaml(o.data_yaml, o.split);
    o.images_dir = split.images_dir, o.labels_dir = split.labels_dir;
    data_yaml_names = std::move(split.class_names);
  }
  check_options(o);
  check_inputs(o.images_dir, o.bands);
  if (o.labels_dir.empty() == o.coco.empty())
    throw UserError("prep detection: give either --labels DIR (YOLO) or --coco FILE");
  if (!o.labels_dir.empty() && !fs::is_directory(o.labels_dir))
    throw UserError("--labels: '" + o.labels_dir + "' is not a directory");
  ImageJob job;
  job.kind = "detection";
  job.strict = o.strict;
  CocoImages coco;
  std::vector<std::string> files;
  if (!o.coco.empty()) {
    // Only this rank's images are kept: the rows the driver's rounds give it (blocks of o.block,
    // round-robin, counted from each file's first input). --holdout: every image (which rows are
    // this rank's is known only once the images are counted).
    const bool many = is_index_path(o.out);
    coco = read_coco(o.coco, job.class_names, [&](int64_t i) {
      return !o.holdout.empty() || ((many ? i % o.part_size : i) / o.block) % rt.size() == rt.rank();
    });
    job.count = coco.count;
    job.class_ids = coco.category_ids;
    job.inputs = o.coco + " (its 'images' list is empty)";
    job.source = o.coco;
    job.no_boxes = "no annotation in " + o.coco + " but crowd regions is on one of these images";
  } else {
    files = list_images(o.images_dir);
    job.count = int64_t(files.size());
    job.inputs = o.images_dir + " (no .jpg, .jpeg, .png, .tif, .tiff or .bmp file under it)";
    job.source = o.images_dir + " + " + o.labels_dir;
    if (!files.empty())
      job.no_boxes = "labels are read from <labels>/<image path>.txt, e.g. " +
                     (fs::path(o.labels_dir) / fs::path(files[0]).replace_extension(".txt")).string() +
                     "; a missing label file means no boxes";
    if (!o.class_names_file.empty()) job.class_names = read_class_names(o.class_names_file);
    if (!data_yaml_names.empty()) job.class_names = data_yaml_names;
  }
  job.decode = [&](int64_t i) {
    Decoded d;
    const CocoImage* im = o.coco.empty() ? nullptr : &coco.kept.at(i);
    d.name = im ? im->file : files[i];
    d.source = (fs::path(o.images_dir) / d.name).string();
    const cv::Mat rgb = load_rgb(o.images_dir, d.name, o.bands);
    std::vector<std::array<float, 4>> boxes;
    std::vector<int32_t> classes;
    std::vector<float> areas;  // in source pixels
    if (!im) {
      const fs::path label = fs::path(o.labels_dir) / fs::path(d.name).replace_extension(".txt");
      read_yolo(label.string(), rgb.cols, rgb.rows, boxes, classes);
      for (const auto& b : boxes) areas.push_back((b[2] - b[0]) * (b[3] - b[1]));
    } else {
      for (size_t b = 0; b < im->bboxes.size(); ++b) boxes.push_back(coco_box(o.coco, *im, b, rgb.cols, rgb.rows));
      classes = im->classes;
      areas.assign(im->areas.begin(), im->areas.end());
    }
    if (!job.class_names.empty())
      for (int32_t c : classes)
        if (c >= int32_t(job.class_names.size()))
          throw SkipImage{d.name + ": class " + std::to_string(c) + " but only " +
                          std::to_string(job.class_names.size()) + " class names"};
    const Letterbox l = letterbox(rgb, o.size);
    d.image = l.image;
    d.original_size = {rgb.cols, rgb.rows};
    if (im) d.image_id = im->id;
    for (size_t b = 0; b < boxes.size(); ++b)
      if (place_box(l, o.size, boxes[b]))
        d.boxes.push_back(boxes[b]), d.box_classes.push_back(classes[b]), d.box_areas.push_back(areas[b]);
    for (size_t b = 0; im && b < im->crowd_bboxes.size(); ++b) {  // clipped to the image, never skipped
      const auto& c = im->crowd_bboxes[b];
      std::array<float, 4> box{float(c[0]), float(c[1]), float(c[0] + c[2]), float(c[1] + c[3])};
      if (place_box(l, o.size, box)) d.crowd_boxes.push_back(box), d.crowd_classes.push_back(im->crowd_classes[b]);
    }
    return d;
  };
  if (o.holdout.empty()) return run_image_job(rt, o, job);
  check_same_inputs(rt, job.count, job.class_names);
  if (job.count == 0) throw UserError("prep: no input entries in " + job.inputs);
  const HoldoutPlan plan(o, job.count, job.source);
  return write_with_holdout(
      rt, o, [] { return nullptr; },
      [&](const PrepCommon& file, bool held, const Tokenizer*) {
        return run_image_job(rt, file, holdout_part(job, plan, held));
      });
}

PrepReport prep_text(const comm::Runtime& rt, const PrepTextOptions& o) {
  check_text_options(o);
  if (o.jsonl.empty()) throw UserError("--jsonl: required");
  check_chat_template(o.chat_template);  // before any record is read
  std::map<int64_t, TextRecord> mine;
  std::vector<std::string> corpus;
  TextJob job;
  job.split = o.split;
  std::set<std::string> splits;
  // --holdout: the records are counted first, so that each rank keeps only the records it writes
  // into either file, and a trained tokenizer learns from --out's records only.
  std::optional<HoldoutPlan> plan;
  if (!o.holdout.empty()) {
    int64_t count = 0;
    read_text_records(o.jsonl, o.split, o.chat_template, splits, [&](TextRecord&&) { ++count; });
    check_same_inputs(rt, count, {});
    plan.emplace(o, count, o.jsonl + split_note(o.split, splits));
  }
  const BlockRounds rounds{0, o.block, rt.rank(), rt.size()};
  read_text_records(o.jsonl, o.split, o.chat_template, splits, [&](TextRecord&& r) {
    const bool held = plan && plan->held(job.count);
    if (rt.rank() == 0 && o.tokenizer.empty() && corpus.size() < kTokenizerCaptions && !held) {
      for (const auto& e : r.exchanges) {
        if (!e.prompt.empty()) corpus.push_back(e.prompt);
        corpus.push_back(e.response);
      }
    }
    if (plan ? plan->owns(job.count, o.block, rt.rank(), rt.size()) : rounds.owns(job.count))
      mine.emplace(job.count, std::move(r));
    ++job.count;
  });
  job.inputs = o.jsonl + split_note(o.split, splits);
  job.record = [&](int64_t i) { return mine.at(i); };
  job.tokenizer_corpus = [&] { return corpus; };
  if (!plan) return run_text_job(rt, o, job);
  if (const std::string e =
          agree_error(rt, job.count == plan->records() ? "" : "prep: " + job.inputs + " changed while read");
      !e.empty())
    throw UserError(e);
  return write_with_holdout(
      rt, o, [&] { return std::make_unique<Tokenizer>(shared_tokenizer(rt, o, job.tokenizer_corpus, true)); },
      [&](const PrepCommon& file, bool held, const Tokenizer* tok) {
        TextJob part = job;
        const std::vector<int64_t>& inputs = plan->inputs(held);
        part.count = int64_t(inputs.size());
        part.record = [&](int64_t i) { return mine.at(inputs[size_t(i)]); };
        part.inputs = job.inputs + (held ? " (held out)" : " (not held out)");
        return run_text_job(rt, file, part, tok);
      });
}

PrepReport prep_generated_images(const comm::Runtime& rt, const PrepCommon& o, const ImageGenerator& g) {
  check_options(o);
  if (!o.holdout.empty()) throw UserError("--holdout: not for generated rows (make two files)");
  ImageJob job;
  job.kind = g.kind;
  job.count = g.count;
  job.inputs = job.source = g.source;
  job.class_names = g.class_names;
  job.tokenizer_corpus = g.tokenizer_corpus;
  job.decode = [&](int64_t i) {
    Decoded d;
    static_cast<GeneratedImage&>(d) = g.make(i);
    return d;
  };
  return run_image_job(rt, o, job);
}

PrepReport prep_generated_text(const comm::Runtime& rt, const PrepCommon& o, const TextGenerator& g) {
  check_text_options(o);
  if (!o.holdout.empty()) throw UserError("--holdout: not for generated rows (make two files)");
  TextJob job;
  job.count = g.count;
  job.inputs = g.source;
  job.record = g.make;
  job.tokenizer_corpus = g.tokenizer_corpus;
  return run_text_job(rt, o, job);
}

}  // namespace meridian::data

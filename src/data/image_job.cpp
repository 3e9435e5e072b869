// The write driver of image_text and detection files (see prep_job.h).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "collective_writer.h"
#include "dataset_index.h"
#include "image_decode.h"
#include "jpeg.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/format.h"
#include "meridian/data/tokenizer.h"
#include "prep_job.h"

namespace fs = std::filesystem;

namespace meridian::data {

namespace {

using Clock = std::chrono::steady_clock;

// One round's rows of this rank, ready to write.
struct RoundRows {
  std::vector<uint8_t> images;        // raw: the pixels; jpeg: every row's JPEG, one after another
  std::vector<int64_t> image_starts;  // jpeg: per row, its first byte in `images`
  std::vector<int32_t> tokens, lengths, labels;
  std::vector<float> boxes;
  std::vector<int32_t> box_classes;
  std::vector<int64_t> box_starts;  // per row: its first box, counted in this round's boxes
  std::vector<float> box_areas;     // detection: per box, in original pixels
  std::vector<float> crowd_boxes;   // detection: COCO's iscrowd regions
  std::vector<int32_t> crowd_classes;
  std::vector<int64_t> crowd_starts;                 // per row: its first crowd region in this round's
  std::vector<int32_t> sizes;                        // detection: per row its original width, height
  std::vector<int64_t> image_ids;                    // detection: per row its COCO image id, or -1
  nlohmann::json strings = nlohmann::json::array();  // per row: [name, [captions...]]
  int64_t rows() const { return int64_t(box_starts.size()); }
};

// What this rank's rounds add up to.
struct Written {
  int64_t rows = 0;         // in the file so far, every rank
  int64_t max_class = -1;   // this rank's largest box class
  int64_t kept_source = 0;  // jpeg: this rank's rows stored as their input's bytes
  std::string records;      // this rank's rows as JSON lines [row, name, [captions]] (text: a tenth of a JSON tree)
  std::vector<std::string> skipped;  // this rank's
};

// `rows`: the inputs of the file, an upper bound of its rows.
void create_datasets(CollectiveWriter& writer, const PrepCommon& o, const ImageJob& job, int64_t rows) {
  const int K = o.captions_per_image, L = o.context_length, S = o.size;
  if (o.encode == "jpeg") {
    // 256 KiB chunks: 10M images of 25 KB are 1M chunks; an image's bytes are read directly (the
    // reader has no chunk cache), not the chunks around them. Starts at 8 KB per input and grows.
    writer.create("/image_bytes", H5T_STD_U8LE, {}, std::max<int64_t>(rows * 8192, 1 << 20), 1 << 18);
    writer.create("/image_offsets", H5T_STD_I64LE, {}, rows + 1, 4096);
  } else {
    writer.create("/images", H5T_STD_U8LE, {hsize_t(S), hsize_t(S), 3}, rows, 1);
  }
  if (job.kind == "image_text") {
    // Token chunks of 8 rows: a random read stays within 8x of the bytes it needs.
    writer.create("/tokens", H5T_STD_I32LE, {hsize_t(K), hsize_t(L)}, rows, 8);
    writer.create("/token_lengths", H5T_STD_I32LE, {hsize_t(K)}, rows, 1024);
    writer.create("/labels", H5T_STD_I32LE, {}, rows, 4096);
  } else {
    writer.create("/boxes", H5T_IEEE_F32LE, {4}, std::max<int64_t>(rows * 4, 1024), 4096);
    writer.create("/box_classes", H5T_STD_I32LE, {}, std::max<int64_t>(rows * 4, 1024), 4096);
    writer.create("/box_offsets", H5T_STD_I64LE, {}, rows + 1, 4096);
    writer.create("/box_areas", H5T_IEEE_F32LE, {}, std::max<int64_t>(rows * 4, 1024), 4096);
    writer.create("/crowd_boxes", H5T_IEEE_F32LE, {4}, 1024, 4096);
    writer.create("/crowd_classes", H5T_STD_I32LE, {}, 1024, 4096);
    writer.create("/crowd_offsets", H5T_STD_I64LE, {}, rows + 1, 4096);
    writer.create("/image_sizes", H5T_STD_I32LE, {2}, rows, 4096);
    writer.create("/image_ids", H5T_STD_I64LE, {}, rows, 4096);
  }
}

// Appends decoded row `d` to `r` (captions tokenized with `tok` for image_text; the image encoded
// with `jpeg` when o.encode is jpeg).
void add_row(const PrepCommon& o, const Tokenizer* tok, JpegCodec* jpeg, Decoded& d, RoundRows& r, Written& w) {
  const int K = o.captions_per_image, L = o.context_length, S = o.size;
  if (!d.image.isContinuous()) d.image = d.image.clone();
  if (jpeg) {
    std::vector<uint8_t> bytes;
    if (!o.reencode && !d.source_bytes.empty())
      bytes = jpeg->same_bytes({d.source_bytes.begin(), d.source_bytes.end()}, d.image);
    else if (!o.reencode && !d.source.empty())
      bytes = jpeg->same_file_bytes(d.source, d.image);
    w.kept_source += !bytes.empty();
    if (bytes.empty()) bytes = jpeg->encode(d.image, o.quality);
    r.image_starts.push_back(int64_t(r.images.size()));
    r.images.insert(r.images.end(), bytes.begin(), bytes.end());
  } else {
    r.images.insert(r.images.end(), d.image.data, d.image.data + size_t(S) * S * 3);
  }
  nlohmann::json caps = nlohmann::json::array();
  for (int k = 0; tok && k < K; ++k) {
    const std::string& caption = d.captions[k % d.captions.size()];
    r.tokens.resize(r.tokens.size() + L);
    r.lengths.push_back(tok->encode(caption, L, r.tokens.data() + r.tokens.size() - L));
    caps.push_back(caption);
  }
  r.labels.push_back(d.label);
  r.sizes.push_back(d.original_size[0] > 0 ? d.original_size[0] : S);
  r.sizes.push_back(d.original_size[1] > 0 ? d.original_size[1] : S);
  r.image_ids.push_back(d.image_id);
  r.box_starts.push_back(int64_t(r.box_classes.size()));
  r.crowd_starts.push_back(int64_t(r.crowd_classes.size()));
  for (size_t b = 0; b < d.crowd_boxes.size(); ++b) {
    r.crowd_boxes.insert(r.crowd_boxes.end(), d.crowd_boxes[b].begin(), d.crowd_boxes[b].end());
    r.crowd_classes.push_back(d.crowd_classes[b]);
  }
  for (size_t b = 0; b < d.boxes.size(); ++b) {
    r.boxes.insert(r.boxes.end(), d.boxes[b].begin(), d.boxes[b].end());
    r.box_classes.push_back(d.box_classes[b]);
    // Without areas (generated rows: stored = original pixels), the box's own.
    r.box_areas.push_back(b < d.box_areas.size() ? d.box_areas[b]
                                                 : (d.boxes[b][2] - d.boxes[b][0]) * (d.boxes[b][3] - d.boxes[b][1]));
    w.max_class = std::max<int64_t>(w.max_class, d.box_classes[b]);
  }
  r.strings.push_back({d.name, caps});
}

// Collective: decodes the rows `next` gives (until it returns false) into one round. Unreadable
// inputs are skipped (reasons in w.skipped); a bad input (UserError) or, with --strict, a skipped
// one throws UserError on every rank: all ranks learn of any rank's failure in this round before
// anyone throws, so the writer's collective calls stay matched.
RoundRows decode_rows(const comm::Runtime& rt, const PrepCommon& o, const ImageJob& job, const Tokenizer* tok,
                      JpegCodec* jpeg, const std::function<bool(Decoded&)>& next, Written& w) {
  RoundRows r;
  bool strict_failure = false;
  std::string fatal;
  for (;;) {
    Decoded d;
    try {
      if (!next(d)) break;
    } catch (const SkipImage& s) {
      w.skipped.push_back(s.reason);
      strict_failure = strict_failure || job.strict;
      continue;
    } catch (const UserError& e) {  // bad input found while decoding: fatal, agreed below
      fatal = e.what();
      break;
    }
    add_row(o, tok, jpeg, d, r, w);
  }
  const std::string error = agree_error(rt, !fatal.empty()   ? fatal
                                            : strict_failure ? "--strict: " + w.skipped.back()
                                                             : "");
  if (!error.empty()) throw UserError(error);
  return r;
}

// Collective: this rank's entries [first, last) of an entry job.
RoundRows decode_round(const comm::Runtime& rt, const PrepCommon& o, const ImageJob& job, const Tokenizer* tok,
                       JpegCodec* jpeg, int64_t first, int64_t last, Written& w) {
  int64_t i = first;
  return decode_rows(
      rt, o, job, tok, jpeg,
      [&](Decoded& d) {
        if (i >= last) return false;
        const int64_t at = i++;
        try {
          d = job.decode(at);
        } catch (const SkipImage&) {
          throw;
        } catch (const UserError&) {
          throw;
        } catch (const std::exception& e) {  // anything else about this input: skipped and reported
          throw SkipImage{"entry " + std::to_string(at) + ": " + e.what()};
        }
        return true;
      },
      w);
}

// Collective: every rank's rows of this round after those of lower ranks; JPEG bytes (`jpeg`) and
// boxes (detection) placed the same way.
void write_round(const comm::Runtime& rt, CollectiveWriter& writer, RaggedColumns* jpeg, RaggedColumns* boxes,
                 RaggedColumns* crowds, const RoundRows& r, Written& w) {
  const int64_t mine = r.rows();
  const int64_t offset = w.rows + rt.exclusive_prefix_sum(mine), end = w.rows + rt.sum(mine);
  // Row datasets start at the file's inputs; a unit job's inputs hold many rows each.
  for (const char* name : {"/images", "/tokens", "/token_lengths", "/labels", "/image_sizes", "/image_ids"})
    if (writer.has(name)) writer.reserve(name, end);
  for (const char* name : {"/image_offsets", "/box_offsets", "/crowd_offsets"})
    if (writer.has(name)) writer.reserve(name, end + 1);
  if (jpeg) {
    jpeg->place(int64_t(r.images.size()));
    jpeg->write("/image_bytes", H5T_NATIVE_UINT8, r.images.data());
    jpeg->write_offsets(offset, r.image_starts);
  } else {
    writer.write("/images", offset, mine, H5T_NATIVE_UINT8, r.images.data());
  }
  if (!boxes) {
    writer.write("/tokens", offset, mine, H5T_NATIVE_INT32, r.tokens.data());
    writer.write("/token_lengths", offset, mine, H5T_NATIVE_INT32, r.lengths.data());
    writer.write("/labels", offset, mine, H5T_NATIVE_INT32, r.labels.data());
  } else {
    boxes->place(int64_t(r.box_classes.size()));
    boxes->write("/boxes", H5T_NATIVE_FLOAT, r.boxes.data());
    boxes->write("/box_classes", H5T_NATIVE_INT32, r.box_classes.data());
    boxes->write("/box_areas", H5T_NATIVE_FLOAT, r.box_areas.data());
    boxes->write_offsets(offset, r.box_starts);
    crowds->place(int64_t(r.crowd_classes.size()));
    crowds->write("/crowd_boxes", H5T_NATIVE_FLOAT, r.crowd_boxes.data());
    crowds->write("/crowd_classes", H5T_NATIVE_INT32, r.crowd_classes.data());
    crowds->write_offsets(offset, r.crowd_starts);
    writer.write("/image_sizes", offset, mine, H5T_NATIVE_INT32, r.sizes.data());
    writer.write("/image_ids", offset, mine, H5T_NATIVE_INT64, r.image_ids.data());
  }
  for (int64_t j = 0; j < mine; ++j)
    w.records += nlohmann::json{offset + j, r.strings[j][0], r.strings[j][1]}.dump(
                     -1, ' ', false, nlohmann::json::error_handler_t::replace) +
                 "\n";
  w.rows = end;
}

// Rank 0's progress line: on a terminal every round, else every 10 s and at the end.
class Progress {
 public:
  // `from`: inputs done before this run (a resumed prep), not counted in the rate; `unit`: what an
  // input is ("inputs", or "shards" of many images each).
  Progress(Clock::time_point start, int64_t from, int64_t count, std::string unit)
      : start_(start), last_print_(start), from_(from), count_(count), unit_(std::move(unit)) {}
  // `done` inputs of all, `images`: rows written by this run so far (every rank's).
  void report(int64_t done, int64_t images, bool final_round) {
    const auto now = Clock::now();
    const double elapsed = std::max(std::chrono::duration<double>(now - start_).count(), 1e-9);
    const double eta = elapsed / std::max<int64_t>(done - from_, 1) * (count_ - done);
    if (tty_ || final_round || now - last_print_ > std::chrono::seconds(10)) {
      std::fprintf(stderr, "%s[prep] %lld/%lld %s  %.1f images/s  ETA %.0f s%s", tty_ ? "\r" : "", (long long)done,
                   (long long)count_, unit_.c_str(), images / elapsed, eta, tty_ && !final_round ? "" : "\n");
      last_print_ = now;
    }
  }
  int64_t images = 0;  // rows of the files finished before the current one (this run)

 private:
  const bool tty_ = isatty(STDERR_FILENO);
  Clock::time_point start_, last_print_;
  int64_t from_, count_;
  std::string unit_;
};

// Collective: the serial phase on rank 0 (after the writer is closed): names and captions streamed
// from every rank, class names, the tokenizer or the last box offset, the attributes; then the
// rename. Every rank's skipped reasons end up in `all_skipped` on rank 0.
void finish_file(const comm::Runtime& rt, const PrepCommon& o, const ImageJob& job, const Tokenizer* tok,
                 const std::string& out, std::array<int64_t, 2> boxes, int64_t jpeg_bytes, const Written& w,
                 std::vector<std::string>& all_skipped) {
  const std::string tmp = out + ".tmp";
  const bool text = job.kind == "image_text";
  const int64_t base = w.rows, max_class = rt.max(w.max_class);
  std::unique_ptr<Finisher> finisher;
  if (rt.rank() == 0) {
    finisher = std::make_unique<Finisher>(tmp);
    finisher->create_strings("/names", {hsize_t(base)});
    if (text) finisher->create_strings("/captions", {hsize_t(base), hsize_t(o.captions_per_image)});
  }
  rt.stream_to_root(w.records, [&](int, const std::string& data) {
    // Runs of consecutive rows: one write each (a run ends at a gap or after 4096 rows).
    std::vector<std::string> names, caps;
    int64_t first = -1;
    const auto flush = [&] {
      if (names.empty()) return;
      finisher->write_strings("/names", first, int64_t(names.size()), names);
      if (text) finisher->write_strings("/captions", first, int64_t(names.size()), caps);
      names.clear(), caps.clear();
    };
    for (size_t at = 0; at < data.size();) {
      const size_t end = data.find('\n', at);
      const auto j = nlohmann::json::parse(data.begin() + at, data.begin() + end);
      at = end + 1;
      const int64_t row = j[0].get<int64_t>();
      if (names.empty() || row != first + int64_t(names.size()) || names.size() == 4096) flush(), first = row;
      names.push_back(j[1].get<std::string>());
      for (const auto& c : j[2]) caps.push_back(c.get<std::string>());
    }
    flush();
  });
  nlohmann::json skipped_json = w.skipped;
  rt.stream_to_root(skipped_json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                    [&](int, const std::string& data) {
                      for (const auto& s : nlohmann::json::parse(data)) all_skipped.push_back(s.get<std::string>());
                    });
  if (rt.rank() == 0) {
    std::vector<std::string> classes = job.class_names;
    if (!text && classes.empty())
      for (int64_t c = 0; c <= max_class; ++c) classes.push_back(std::to_string(c));
    if (!classes.empty()) finisher->write_string_list("/class_names", classes);
    if (!job.class_ids.empty()) finisher->write_int64_list("/class_ids", job.class_ids);
    if (o.encode == "jpeg") finisher->write_int64("/image_offsets", base, jpeg_bytes);
    finisher->write_image_format(o.encode, o.size, o.size);
    if (text) {
      finisher->write_tokenizer(*tok);
    } else {
      finisher->write_int64("/box_offsets", base, boxes[0]);
      finisher->write_int64("/crowd_offsets", base, boxes[1]);
    }
    finisher->finish(job.kind, job.split, base);
    finisher.reset();
    fs::rename(tmp, out);
  }
  rt.barrier();
}

// What one file of the job holds, the same on every rank (all_skipped: every rank's reasons, on rank 0).
struct FileTotals {
  int64_t rows = 0, boxes = 0, jpeg_bytes = 0, kept_source = 0, skipped = 0;
  std::vector<std::string> all_skipped;
};

// Collective: the job's inputs [first, last) into `out` (through out.tmp, which any failure removes:
// failures are agreed across ranks before anyone throws, so the writer's collective calls stay
// matched).
FileTotals write_file(const comm::Runtime& rt, const PrepCommon& o, const ImageJob& job, const Tokenizer* tok,
                      int64_t first, int64_t last, const std::string& out, Progress& progress) {
  const bool text = job.kind == "image_text";
  const std::string tmp = out + ".tmp";
  FileTotals t;
  Written w;
  leaving_nothing_on_failure(rt, tmp, [&] {
    CollectiveWriter writer(rt, tmp);
    create_datasets(writer, o, job, last - first);
    std::unique_ptr<RaggedColumns> boxes, crowds, jpeg_columns;
    std::unique_ptr<JpegCodec> jpeg;
    if (o.encode == "jpeg") {
      jpeg = std::make_unique<JpegCodec>();
      jpeg_columns =
          std::make_unique<RaggedColumns>(rt, writer, std::vector<std::string>{"/image_bytes"}, "/image_offsets");
    }
    if (!text) {
      boxes = std::make_unique<RaggedColumns>(
          rt, writer, std::vector<std::string>{"/boxes", "/box_classes", "/box_areas"}, "/box_offsets");
      crowds = std::make_unique<RaggedColumns>(rt, writer, std::vector<std::string>{"/crowd_boxes", "/crowd_classes"},
                                               "/crowd_offsets");
    }
    // Entry jobs: a block of entries per rank per round. Unit jobs: a unit (shard) per rank per
    // round, its samples written `block` at a time until every rank's unit is done.
    const BlockRounds rounds{last - first, job.open_unit ? 1 : o.block, rt.rank(), rt.size()};
    for (int64_t round = 0; round < rounds.rounds(); ++round) {
      const int64_t mine_first = first + rounds.first(round), mine_last = first + rounds.last(round);
      if (!job.open_unit) {
        write_round(rt, writer, jpeg_columns.get(), boxes.get(), crowds.get(),
                    decode_round(rt, o, job, tok, jpeg.get(), mine_first, mine_last, w), w);
      } else {
        std::function<bool(Decoded&)> unit;
        if (mine_first < mine_last) unit = job.open_unit(mine_first);
        bool more = bool(unit);
        while (rt.sum(int64_t(more)) > 0) {
          int64_t rows = 0;
          const auto next = [&](Decoded& d) {
            if (!more || rows == o.block) return false;
            more = unit(d);
            rows += more;
            return more;
          };
          write_round(rt, writer, jpeg_columns.get(), boxes.get(), crowds.get(),
                      decode_rows(rt, o, job, tok, jpeg.get(), next, w), w);
        }
      }
      if (rt.rank() == 0)
        progress.report(std::min(last, first + (round + 1) * rounds.per_round()), progress.images + w.rows,
                        last == job.count && round + 1 == rounds.rounds());
    }
    t.boxes = boxes ? boxes->total() : 0;
    const int64_t crowd_count = crowds ? crowds->total() : 0;
    t.jpeg_bytes = jpeg_columns ? jpeg_columns->total() : 0;
    std::map<std::string, int64_t> final_rows;
    if (jpeg) {
      final_rows.insert({{"/image_bytes", t.jpeg_bytes}, {"/image_offsets", w.rows + 1}});
    } else {
      final_rows.insert({"/images", w.rows});
    }
    if (text) {
      final_rows.insert({{"/tokens", w.rows}, {"/token_lengths", w.rows}, {"/labels", w.rows}});
    } else {
      final_rows.insert({{"/boxes", t.boxes},
                         {"/box_classes", t.boxes},
                         {"/box_areas", t.boxes},
                         {"/box_offsets", w.rows + 1},
                         {"/crowd_boxes", crowd_count},
                         {"/crowd_classes", crowd_count},
                         {"/crowd_offsets", w.rows + 1},
                         {"/image_sizes", w.rows},
                         {"/image_ids", w.rows}});
    }
    writer.close(final_rows);
    if (w.rows == 0) {
      const int64_t total = rt.sum(int64_t(w.skipped.size()));
      const std::string example = agree_error(rt, w.skipped.empty() ? "" : w.skipped.front());  // the lowest rank's
      throw UserError("prep: no input could be read (" + std::to_string(total) + " skipped" +
                      (example.empty() ? "" : ", e.g. " + example) + ")");
    }
    finish_file(rt, o, job, tok, out, {t.boxes, crowd_count}, t.jpeg_bytes, w, t.all_skipped);
  });
  t.rows = w.rows;
  t.kept_source = rt.sum(w.kept_source);
  t.skipped = rt.sum(int64_t(w.skipped.size()));
  return t;
}

PrepReport report_of(const comm::Runtime& rt, const PrepCommon& o, const ImageJob& job, int64_t inputs,
                     const FileTotals& t, int64_t files, Clock::time_point start) {
  PrepReport report;
  report.inputs = job.open_unit ? t.rows + t.skipped : inputs;  // unit jobs: the samples the units held
  report.written = t.rows;
  report.boxes = t.boxes;
  report.files = files;
  report.image_bytes = o.encode == "jpeg" ? t.jpeg_bytes : t.rows * o.size * o.size * 3;
  report.kept_source_bytes = t.kept_source;
  report.skipped = t.all_skipped;
  report.skipped_count = t.skipped;
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (job.kind == "detection" && t.boxes == 0) {
    report.warnings.push_back("0 boxes: none of the " + std::to_string(t.rows) + " images written has a box" +
                              (job.no_boxes.empty() ? "" : " (" + job.no_boxes + ")"));
    if (rt.rank() == 0) spdlog::warn("prep detection: {}", report.warnings.back());
  }
  return report;
}

}  // namespace

PrepReport run_image_job(const comm::Runtime& rt, const PrepCommon& o, const ImageJob& job, const Tokenizer* given) {
  const auto start = Clock::now();
  const bool text = job.kind == "image_text";
  check_output(rt, o);
  check_same_inputs(rt, job.count, job.class_names);
  if (job.count == 0) throw UserError("prep: no input entries in " + job.inputs);
  const auto tokenizer = [&](const PrepCommon& po) {
    return text ? std::make_unique<Tokenizer>(shared_tokenizer(rt, po, job.tokenizer_corpus, false)) : nullptr;
  };
  if (!is_index_path(o.out)) {
    Progress progress(start, 0, job.count, job.open_unit ? "shards" : "inputs");
    const auto tok = given ? nullptr : tokenizer(o);
    return report_of(rt, o, job, job.count,
                     write_file(rt, o, job, given ? given : tok.get(), 0, job.count, o.out, progress), 1, start);
  }

  // Many files: part after part, each listed in the index once it is complete.
  IndexPlan plan;
  std::string error;
  try {
    plan = plan_index(o, job);
  } catch (const UserError& e) {
    error = e.what();
  }
  error = agree_error(rt, error);
  if (!error.empty()) throw UserError(error);
  PrepCommon po = o;
  if (!plan.index.parts.empty()) po.tokenizer = part_path(o.out, plan.index.parts.front().file);  // one tokenizer
  const auto owned = given ? nullptr : tokenizer(po);
  const Tokenizer* tok = given ? given : owned.get();
  Progress progress(start, plan.next_input, job.count, job.open_unit ? "shards" : "inputs");
  FileTotals all;
  int64_t files = 0;
  for (int64_t first = plan.next_input; first < job.count; first += o.part_size, ++files) {
    const int64_t last = std::min(job.count, first + o.part_size);
    IndexPart part;
    part.file = part_file_name(o.out, int64_t(plan.index.parts.size()));
    const FileTotals t = write_file(rt, po, job, tok, first, last, part_path(o.out, part.file), progress);
    part.count = t.rows, part.source = job.source, part.source_count = job.count;
    part.first_input = first, part.last_input = last;
    plan.index.parts.push_back(part);
    progress.images += t.rows;
    if (rt.rank() == 0) write_index(o.out, plan.index);
    all.rows += t.rows, all.boxes += t.boxes, all.jpeg_bytes += t.jpeg_bytes, all.kept_source += t.kept_source;
    all.skipped += t.skipped;
    all.all_skipped.insert(all.all_skipped.end(), t.all_skipped.begin(), t.all_skipped.end());
  }
  plan.index.complete = true;
  if (rt.rank() == 0) write_index(o.out, plan.index);
  rt.barrier();
  return report_of(rt, o, job, job.count - plan.next_input, all, files, start);
}

}  // namespace meridian::data

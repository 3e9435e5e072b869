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
#include "image_decode.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/tokenizer.h"
#include "prep_job.h"

namespace fs = std::filesystem;

namespace meridian::data {

namespace {

using Clock = std::chrono::steady_clock;

// One round's rows of this rank, ready to write.
struct RoundRows {
  std::vector<uint8_t> images;
  std::vector<int32_t> tokens, lengths, labels;
  std::vector<float> boxes;
  std::vector<int32_t> box_classes;
  std::vector<int64_t> box_starts;                   // per row: its first box, counted in this round's boxes
  nlohmann::json strings = nlohmann::json::array();  // per row: [name, [captions...]]
  int64_t rows() const { return int64_t(box_starts.size()); }
};

// What this rank's rounds add up to.
struct Written {
  int64_t rows = 0;                                  // in the file so far, every rank
  int64_t max_class = -1;                            // this rank's largest box class
  nlohmann::json records = nlohmann::json::array();  // [row, name, [captions]] of this rank
  std::vector<std::string> skipped;                  // this rank's
};

void create_datasets(CollectiveWriter& writer, const PrepCommon& o, const ImageJob& job) {
  const int K = o.captions_per_image, L = o.context_length, S = o.size;
  writer.create("/images", H5T_STD_U8LE, {hsize_t(S), hsize_t(S), 3}, job.count, 1);
  if (job.kind == "image_text") {
    // Token chunks of 8 rows: a random read stays within 8x of the bytes it needs.
    writer.create("/tokens", H5T_STD_I32LE, {hsize_t(K), hsize_t(L)}, job.count, 8);
    writer.create("/token_lengths", H5T_STD_I32LE, {hsize_t(K)}, job.count, 1024);
    writer.create("/labels", H5T_STD_I32LE, {}, job.count, 4096);
  } else {
    writer.create("/boxes", H5T_IEEE_F32LE, {4}, std::max<int64_t>(job.count * 4, 1024), 4096);
    writer.create("/box_classes", H5T_STD_I32LE, {}, std::max<int64_t>(job.count * 4, 1024), 4096);
    writer.create("/box_offsets", H5T_STD_I64LE, {}, job.count + 1, 4096);
  }
}

// Appends decoded row `d` to `r` (captions tokenized with `tok` for image_text).
void add_row(const PrepCommon& o, const Tokenizer* tok, Decoded& d, RoundRows& r, Written& w) {
  const int K = o.captions_per_image, L = o.context_length, S = o.size;
  r.images.insert(r.images.end(), d.image.data, d.image.data + size_t(S) * S * 3);
  nlohmann::json caps = nlohmann::json::array();
  for (int k = 0; tok && k < K; ++k) {
    const std::string& caption = d.captions[k % d.captions.size()];
    r.tokens.resize(r.tokens.size() + L);
    r.lengths.push_back(tok->encode(caption, L, r.tokens.data() + r.tokens.size() - L));
    caps.push_back(caption);
  }
  r.labels.push_back(d.label);
  r.box_starts.push_back(int64_t(r.box_classes.size()));
  for (size_t b = 0; b < d.boxes.size(); ++b) {
    r.boxes.insert(r.boxes.end(), d.boxes[b].begin(), d.boxes[b].end());
    r.box_classes.push_back(d.box_classes[b]);
    w.max_class = std::max<int64_t>(w.max_class, d.box_classes[b]);
  }
  r.strings.push_back({d.name, caps});
}

// Collective: decodes this rank's rows [first, last). Unreadable inputs are skipped (reasons in
// w.skipped); a bad input (UserError) or, with --strict, a skipped one throws UserError on every
// rank: all ranks learn of any rank's failure in this round before anyone throws, so the writer's
// collective calls stay matched.
RoundRows decode_round(const comm::Runtime& rt, const PrepCommon& o, const ImageJob& job, const Tokenizer* tok,
                       int64_t first, int64_t last, Written& w) {
  RoundRows r;
  bool strict_failure = false;
  std::string fatal;
  for (int64_t i = first; i < last && fatal.empty(); ++i) {
    Decoded d;
    try {
      d = job.decode(i);
    } catch (const SkipImage& s) {
      w.skipped.push_back(s.reason);
      strict_failure = strict_failure || job.strict;
      continue;
    } catch (const UserError& e) {  // bad input found while decoding: fatal, agreed below
      fatal = e.what();
      continue;
    } catch (const std::exception& e) {  // anything else about this input: skipped and reported
      w.skipped.push_back("entry " + std::to_string(i) + ": " + e.what());
      strict_failure = strict_failure || job.strict;
      continue;
    }
    add_row(o, tok, d, r, w);
  }
  const std::string error = agree_error(rt, !fatal.empty()   ? fatal
                                            : strict_failure ? "--strict: " + w.skipped.back()
                                                             : "");
  if (!error.empty()) throw UserError(error);
  return r;
}

// Collective: every rank's rows of this round after those of lower ranks; boxes (detection) placed
// the same way.
void write_round(const comm::Runtime& rt, CollectiveWriter& writer, RaggedColumns* boxes, const RoundRows& r,
                 Written& w) {
  const int64_t mine = r.rows();
  const int64_t offset = w.rows + rt.exclusive_prefix_sum(mine);
  writer.write("/images", offset, mine, H5T_NATIVE_UINT8, r.images.data());
  if (!boxes) {
    writer.write("/tokens", offset, mine, H5T_NATIVE_INT32, r.tokens.data());
    writer.write("/token_lengths", offset, mine, H5T_NATIVE_INT32, r.lengths.data());
    writer.write("/labels", offset, mine, H5T_NATIVE_INT32, r.labels.data());
  } else {
    boxes->place(int64_t(r.box_classes.size()));
    boxes->write("/boxes", H5T_NATIVE_FLOAT, r.boxes.data());
    boxes->write("/box_classes", H5T_NATIVE_INT32, r.box_classes.data());
    boxes->write_offsets(offset, r.box_starts);
  }
  for (int64_t j = 0; j < mine; ++j) w.records.push_back({offset + j, r.strings[j][0], r.strings[j][1]});
  w.rows += rt.sum(mine);
}

// Rank 0's progress line: on a terminal every round, else every 10 s and at the end.
class Progress {
 public:
  Progress(Clock::time_point start, int64_t count) : start_(start), last_print_(start), count_(count) {}
  void report(int64_t done, bool final_round) {
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = done / std::max(elapsed, 1e-9);
    if (tty_ || final_round || now - last_print_ > std::chrono::seconds(10)) {
      std::fprintf(stderr, "%s[prep] %lld/%lld inputs  %.1f images/s  ETA %.0f s%s", tty_ ? "\r" : "", (long long)done,
                   (long long)count_, rate, (count_ - done) / std::max(rate, 1e-9), tty_ && !final_round ? "" : "\n");
      last_print_ = now;
    }
  }

 private:
  const bool tty_ = isatty(STDERR_FILENO);
  Clock::time_point start_, last_print_;
  int64_t count_;
};

// Collective: the serial phase on rank 0 (after the writer is closed): names and captions streamed
// from every rank, class names, the tokenizer or the last box offset, the attributes; then the
// rename. Every rank's skipped reasons end up in `all_skipped` on rank 0.
void finish_file(const comm::Runtime& rt, const PrepCommon& o, const ImageJob& job, const Tokenizer* tok,
                 const std::string& tmp, int64_t boxes, const Written& w, std::vector<std::string>& all_skipped) {
  const bool text = job.kind == "image_text";
  const int64_t base = w.rows, max_class = rt.max(w.max_class);
  std::unique_ptr<Finisher> finisher;
  if (rt.rank() == 0) {
    finisher = std::make_unique<Finisher>(tmp);
    finisher->create_strings("/names", {hsize_t(base)});
    if (text) finisher->create_strings("/captions", {hsize_t(base), hsize_t(o.captions_per_image)});
  }
  rt.stream_to_root(w.records.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                    [&](int, const std::string& data) {
                      const auto j = nlohmann::json::parse(data);
                      size_t i = 0;
                      while (i < j.size()) {  // runs of consecutive rows: one write each
                        size_t e = i + 1;
                        while (e < j.size() && j[e][0].get<int64_t>() == j[e - 1][0].get<int64_t>() + 1) ++e;
                        std::vector<std::string> names, caps;
                        for (size_t q = i; q < e; ++q) {
                          names.push_back(j[q][1].get<std::string>());
                          for (const auto& c : j[q][2]) caps.push_back(c.get<std::string>());
                        }
                        const int64_t row = j[i][0].get<int64_t>(), n = int64_t(e - i);
                        finisher->write_strings("/names", row, n, names);
                        if (text) finisher->write_strings("/captions", row, n, caps);
                        i = e;
                      }
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
    if (text) {
      finisher->write_tokenizer(*tok);
    } else {
      finisher->write_int64("/box_offsets", base, boxes);
    }
    finisher->finish(job.kind, job.split, base);
    finisher.reset();
    fs::rename(tmp, o.out);
  }
  rt.barrier();
}

}  // namespace

PrepReport run_image_job(const comm::Runtime& rt, const PrepCommon& o, const ImageJob& job) {
  const auto start = Clock::now();
  const bool text = job.kind == "image_text";
  check_output(rt, o);
  check_same_inputs(rt, job.count, job.class_names);
  if (job.count == 0) throw UserError("prep: no input entries in " + job.inputs);

  std::unique_ptr<Tokenizer> tok;
  if (text) tok = std::make_unique<Tokenizer>(shared_tokenizer(rt, o, job.tokenizer_corpus, /*keep_whitespace=*/false));
  const std::string tmp = o.out + ".tmp";
  // Any failure below leaves no output: the temporary file is removed (failures are agreed across
  // ranks before anyone throws, so the writer's collective calls stay matched).
  std::vector<std::string> all_skipped;
  Written w;
  int64_t box_total = 0;
  leaving_nothing_on_failure(rt, tmp, [&] {
    CollectiveWriter writer(rt, tmp);
    create_datasets(writer, o, job);
    std::unique_ptr<RaggedColumns> boxes;
    if (!text)
      boxes = std::make_unique<RaggedColumns>(rt, writer, std::vector<std::string>{"/boxes", "/box_classes"},
                                              "/box_offsets");
    const BlockRounds rounds{job.count, o.block, rt.rank(), rt.size()};
    Progress progress(start, job.count);
    for (int64_t round = 0; round < rounds.rounds(); ++round) {
      const RoundRows r = decode_round(rt, o, job, tok.get(), rounds.first(round), rounds.last(round), w);
      write_round(rt, writer, boxes.get(), r, w);
      if (rt.rank() == 0)
        progress.report(std::min(job.count, (round + 1) * rounds.per_round()), round + 1 == rounds.rounds());
    }
    box_total = boxes ? boxes->total() : 0;
    std::map<std::string, int64_t> final_rows{{"/images", w.rows}};
    if (text) {
      final_rows.insert({{"/tokens", w.rows}, {"/token_lengths", w.rows}, {"/labels", w.rows}});
    } else {
      final_rows.insert({{"/boxes", box_total}, {"/box_classes", box_total}, {"/box_offsets", w.rows + 1}});
    }
    writer.close(final_rows);
    if (w.rows == 0) {
      const int64_t total = rt.sum(int64_t(w.skipped.size()));
      const std::string example = agree_error(rt, w.skipped.empty() ? "" : w.skipped.front());  // the lowest rank's
      throw UserError("prep: no input could be read (" + std::to_string(total) + " skipped" +
                      (example.empty() ? "" : ", e.g. " + example) + ")");
    }
    finish_file(rt, o, job, tok.get(), tmp, box_total, w, all_skipped);
  });

  PrepReport report;
  report.inputs = job.count;
  report.written = w.rows;
  report.boxes = box_total;
  report.skipped = all_skipped;
  report.skipped_count = rt.sum(int64_t(w.skipped.size()));
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!text && box_total == 0) {
    report.warnings.push_back("0 boxes: none of the " + std::to_string(w.rows) + " images written has a box" +
                              (job.no_boxes.empty() ? "" : " (" + job.no_boxes + ")"));
    if (rt.rank() == 0) spdlog::warn("prep detection: {}", report.warnings.back());
  }
  return report;
}

}  // namespace meridian::data

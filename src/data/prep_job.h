// Private to data/: the two write drivers of prep and what they share. Every function here is
// collective (every rank calls it with the same job) unless it says otherwise.
//
// run_image_job writes image_text and detection files: per round, each rank decodes its block of
// rows (BlockRounds), all ranks agree on failures, then write their rows collectively (boxes as
// RaggedColumns); rank 0 finishes the file (strings, tokenizer or box offsets, attributes).
// run_text_job writes text files the same way, documents as RaggedColumns of tokens.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "dataset_index.h"
#include "meridian/data/prep.h"
#include "text_records_reader.h"

namespace meridian::data {

class Tokenizer;

// One row to be: decoded on the rank that owns it (image, name, captions, label, boxes as a
// generator makes them), with the input it came from.
struct Decoded : GeneratedImage {
  std::string source;        // the input file, when there is one: with --encode jpeg its bytes are kept as
                             // they are when they decode to exactly `image`
  std::string source_bytes;  // or the input JPEG's bytes themselves (a tar member)
};

struct ImageJob {
  std::string kind = "image_text";               // or "detection"
  int64_t count = 0;                             // rows to consider
  std::function<Decoded(int64_t index)> decode;  // called only for this rank's indices; may throw SkipImage
  // Instead of decode, for inputs that each hold many samples (webdataset shards): `count` counts
  // these units, and open_unit(i) (this rank's units only) returns the unit's sample source: each
  // call gives the next sample (true) or says the unit is done (false); it may throw SkipImage for a
  // bad sample and go on. Rows keep the order of each rank's units; ranks take units round-robin.
  std::function<std::function<bool(Decoded&)>(int64_t unit)> open_unit;
  std::vector<std::string> class_names;                        // detection: empty = "0".."C-1" from the boxes
  std::vector<int64_t> class_ids;                              // detection from COCO: each class's category id
  std::function<std::vector<std::string>()> tokenizer_corpus;  // image_text, rank 0, when training
  std::string split;
  std::string inputs;    // where the entries come from, for messages: "<file>[ with split 's' (...)]"
  std::string source;    // the same, as a dataset of many files records it (a resume must find it unchanged)
  std::string no_boxes;  // detection: why a file without boxes may have come out, for the warning
  bool strict = false;
};

struct TextJob {
  int64_t count = 0;
  std::function<TextRecord(int64_t)> record;  // this rank's indices only
  std::function<std::vector<std::string>()> tokenizer_corpus;
  std::string split;
  std::string inputs;  // where the records come from, for messages: "<file>[ with split 's' (...)]"
};

// Not collective (every rank decides the same from the index on the shared output directory): for
// an output that is a dataset of many files, the index to continue and the first input to write (a
// new index, one to --resume, or one to --append to). UserError for an index that does not fit the
// request (image_job_index.cpp).
struct IndexPlan {
  DatasetIndex index;
  int64_t next_input = 0;
};
IndexPlan plan_index(const PrepCommon& o, const ImageJob& job);

// Writes o.out (through o.out + ".tmp", removed on failure). Throws UserError on every rank. `tok`:
// the tokenizer to use (--holdout's two files share one); null: shared_tokenizer's from o.
PrepReport run_image_job(const comm::Runtime& rt, const PrepCommon& o, const ImageJob& job,
                         const Tokenizer* tok = nullptr);
PrepReport run_text_job(const comm::Runtime& rt, const PrepCommon& o, const TextJob& job,
                        const Tokenizer* tok = nullptr);

// --holdout (o.holdout not empty): which file each of a job's `records` inputs goes to, and its row
// there; each file's rows are dealt to the ranks as BlockRounds deals a whole job's, so a reader
// that keeps only this rank's inputs asks owns(). Built by every rank from the same count (check
// that with check_same_inputs first): UserError naming --holdout, the same on every rank, when it
// does not fit the records of `inputs`.
class HoldoutPlan {
 public:
  HoldoutPlan(const PrepCommon& o, int64_t records, const std::string& inputs);
  int64_t records() const { return int64_t(held_.size()); }
  // Whether `input` goes to o.holdout_out (false past records(): an input that changed since it was counted).
  bool held(int64_t input) const { return input < records() && held_[size_t(input)]; }
  // The inputs of o.holdout_out (held) or of o.out, increasing.
  const std::vector<int64_t>& inputs(bool held) const { return inputs_[held]; }
  // Whether rank `rank` of `size` writes `input` (into its file) with o.block rows per round (false
  // past records()).
  bool owns(int64_t input, int block, int rank, int size) const;

 private:
  std::vector<int64_t> inputs_[2];
  std::vector<bool> held_;
  std::vector<int64_t> row_;  // per input: its row in its file
};

// Collective, for --holdout: writes o.out (plan.inputs(false)) and o.holdout_out (plan.inputs(true))
// with write(file's options, held, tok), one tokenizer for both: tokenizer() (null for detection),
// called once the outputs are checked. Each file is written as <file>.tmp (write's options name it,
// with overwrite and no holdout); both are renamed once both are complete, and any failure removes
// both. Returns out's report with the held-out file's as its `holdout`.
PrepReport write_with_holdout(const comm::Runtime& rt, const PrepCommon& o,
                              const std::function<std::unique_ptr<Tokenizer>()>& tokenizer,
                              const std::function<PrepReport(const PrepCommon&, bool, const Tokenizer*)>& write);

// ---- shared by the drivers ----

// The first non-empty error over all ranks (in rank order), the same string on every rank: an
// error found on some ranks becomes everyone's, with the same message.
std::string agree_error(const comm::Runtime& rt, const std::string& mine);

// The tokenizer every rank uses: given (a .model, or another dataset's), or trained on rank 0 from
// `corpus()` (called on rank 0 only); the model bytes are broadcast.
Tokenizer shared_tokenizer(const comm::Runtime& rt, const PrepCommon& o,
                           const std::function<std::vector<std::string>()>& corpus, bool keep_whitespace);

// The output is refused when it is a directory, exists (unless --overwrite) or its directory is
// missing or not writable; decided on rank 0, the same error on every rank.
void check_output(const comm::Runtime& rt, const PrepCommon& o);

// Every rank read the inputs itself: they must have seen the same ones (a node-local path or a
// directory still being filled would give ranks different files and a corrupt output).
void check_same_inputs(const comm::Runtime& rt, int64_t count, const std::vector<std::string>& class_names);

// Runs `write` (which builds `tmp` and renames it); on any failure rank 0 removes `tmp`, so nothing
// half-made is left behind.
void leaving_nothing_on_failure(const comm::Runtime& rt, const std::string& tmp, const std::function<void()>& write);

}  // namespace meridian::data

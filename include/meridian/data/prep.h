// `meridian prep`: turns images + captions, detection labels or text records (or rows a program
// makes: prep_generated_*) into one dataset file.
//
// Collective: every rank calls it with the same options. Ranks decode disjoint blocks of the input
// (round-robin, so the file keeps the input order) and write them by hyperslab into one file; the
// same works on one rank. The file is written as <out>.tmp and renamed to <out> only once complete
// (with --holdout: both files, once both are complete).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

namespace meridian::comm {
class Runtime;
}

namespace meridian::data {

struct PrepCommon {
  std::string out;
  bool overwrite = false;      // else an existing <out> is an error
  int size = 256;              // images are resized (shorter side) and center-cropped to size x size
  int captions_per_image = 5;  // K: extra captions are dropped, missing ones repeat the ones given
  int context_length = 64;     // L tokens per caption (eos included)
  std::string tokenizer;       // a SentencePiece .model, or a dataset .h5 to take it from; empty: train one
  int vocab_size = 8000;       // upper bound for a trained tokenizer
  int block = 32;              // images per rank per collective write
  // Image kinds: "raw" (/images, pixels) or "jpeg" (/image_bytes: each stored image as a JPEG of
  // `quality`, or the input file's own bytes when they decode to exactly the stored pixels).
  std::string encode = "raw";
  int quality = 90;
  bool reencode = false;  // jpeg: encode every image, input JPEGs of the stored size too
  // An `out` ending in ".json" is a dataset of many files (image kinds): a file of each `part_size`
  // inputs, NAME-00000.h5, ..., listed in the index NAME.json as each is finished. `resume`
  // continues an interrupted prep of the same inputs after its last finished file; `append` adds
  // the inputs as more files to a finished dataset (same tokenizer).
  int64_t part_size = 100000;
  bool resume = false, append = false;
  // A validation split where the data has none (prep text, image-text, detection; one .h5 file out):
  // `holdout` records, "N" (an integer >= 1: that many) or "F" (0 < F < 1: round(F x records), at
  // least 1), of the records left after `split`, go to `holdout_out`, the rest to `out`. Which ones:
  // holdout_indices(records, n, holdout_seed), the same on every rank and every run of the same
  // inputs. Both files are made with one tokenizer (a trained one learns from `out`'s records only)
  // and renamed from their .tmp together, once both are complete. Empty: no holdout.
  std::string holdout;
  std::string holdout_out;
  uint64_t holdout_seed = 0;
};

struct PrepImageTextOptions : PrepCommon {
  std::string images_dir;  // image paths in the captions file are relative to it
  std::string
      captions_file;  // .jsonl ({"image", "captions": [...] or "caption", "class"?, "split"?}), .csv, or a
                      // Karpathy-style .json (UCM-captions, RSICD, RSITMD: images[].filename, split, sentences[].raw)
  // Instead of captions_file: images under images_dir/<class>/ (AID, NWPU-RESISC45, UCM as shipped);
  // the folder is the class (label), the class name with spaces for underscores the one caption.
  bool class_folders = false;
  // With class_folders: a YAML map of folder to class name ({BareLand: bare land, Airport: airport
  // terminal}) that names those classes instead (the rest: their folder in words). DataError naming
  // the file and key for a folder that is not there or an empty name.
  std::string class_names_file;
  // Instead of images_dir + captions_file: webdataset tar shards ("shards/{00000..00099}.tar"),
  // key.jpg (or png, webp, tif, bmp) + key.txt or key.json ("caption" or "captions") per sample,
  // divided among the ranks by shard. A sample without image or caption, an undecodable image or a
  // damaged shard is skipped and reported (an error with `strict`).
  std::string webdataset;
  std::string split;       // keep only entries of this split; empty: all
  std::vector<int> bands;  // 1-based bands to use as R,G,B for multi-band images; empty: automatic
  bool strict = false;     // an unreadable image is fatal instead of skipped and reported
};

// Detection: images are letterboxed (longer side to `size`, padded with gray 114, centred) so no
// box is cut; boxes are stored as x_min, y_min, x_max, y_max in pixels of the stored image.
struct PrepDetectionOptions : PrepCommon {
  std::string images_dir;        // every image under it (sorted by path), or the COCO file names' root
  std::string labels_dir;        // YOLO: <labels_dir>/<image path relative to images_dir, .txt>
  std::string coco;              // COCO instances JSON (instead of labels_dir)
  std::string class_names_file;  // YOLO: one name per line; default "0".."C-1"
  std::string data_yaml;         // Ultralytics' data.yaml instead of the four above: its `split`
  std::string split = "train";   // train, val or test
  std::vector<int> bands;
  bool strict = false;  // an unreadable image or label file is fatal instead of skipped
};

// Text for language models: one JSONL record per document, either an instruction record
// {"instruction", "input"?, "output"} (formatted with the Alpaca prompt template; the loss mask
// covers the response and eos only) or plain text {"text"} (loss on every token).
struct PrepTextOptions : PrepCommon {
  std::string jsonl;                      // JSON Lines or one JSON array of records (Alpaca's alpaca_data.json)
  std::string split;                      // keep only records whose "split" is this; empty: all
  std::string chat_template = "llama-2";  // for {"messages": [...]} records (chat_exchanges): llama-2, mistral
};

struct PrepReport {
  int64_t inputs = 0;                 // entries considered
  int64_t written = 0;                // rows in the file
  int64_t boxes = 0;                  // detection: boxes in the file
  int64_t tokens = 0;                 // text: tokens in the file
  std::vector<std::string> skipped;   // "<name>: <reason>", on rank 0 (empty elsewhere)
  int64_t skipped_count = 0;          // on every rank
  std::vector<std::string> warnings;  // e.g. a detection file without boxes; on every rank
  int64_t files = 1;                  // dataset files written (a dataset of many files: this run's)
  int64_t image_bytes = 0;            // image kinds: bytes of all stored images (raw: N x H x W x 3)
  int64_t kept_source_bytes = 0;      // jpeg: images stored as their input file's bytes (not re-encoded)
  double seconds = 0;
  std::shared_ptr<PrepReport> holdout;  // with options.holdout: the held-out file's report (this one: out's)
};

// Throws UserError/DataError for bad options or input (naming the file and line), on every rank.
PrepReport prep_image_text(const comm::Runtime& runtime, const PrepImageTextOptions& options);
PrepReport prep_detection(const comm::Runtime& runtime, const PrepDetectionOptions& options);
PrepReport prep_text(const comm::Runtime& runtime, const PrepTextOptions& options);

// --holdout: the number of records `value` holds out of `records`: an integer N >= 1 (N) or a
// fraction 0 < F < 1 (round(F x records), halves away from zero, at least 1). UserError naming
// --holdout for any other value, or for one that leaves no record for --out ("--holdout 500: larger
// than the 200 records of <inputs>"). Not collective.
int64_t holdout_count(const std::string& value, int64_t records, const std::string& inputs);
// UserError unless `value` is an N or F that holdout_count accepts (for some number of records).
void check_holdout_value(const std::string& value);
// The `n` held-out indices of records [0, records), increasing: the n with the smallest
// splitmix64(splitmix64(seed) ^ index), so the same on every machine, rank and run for the same
// (records, n, seed). Requires 0 <= n <= records. Not collective.
std::vector<int64_t> holdout_indices(int64_t records, int64_t n, uint64_t seed);

// The Alpaca prompt template prep text uses for instruction records (`input` may be empty); the
// response follows it. `meridian generate` prompts a fine-tuned model the same way.
std::string alpaca_prompt(const std::string& instruction, const std::string& input);

// ---- prep from rows a program makes (the synthetic demo data of data/synthetic, a user's own
// generator): the same drivers, files and guarantees as the readers above ----

// One image row, made on the rank that writes it.
struct GeneratedImage {
  cv::Mat image;  // options.size x options.size x 3, uint8, RGB
  std::string name;
  std::vector<std::string> captions;        // image_text: up to options.captions_per_image (repeated when fewer)
  int32_t label = -1;                       // image_text: index into class_names; -1: none
  std::vector<std::array<float, 4>> boxes;  // detection: x_min, y_min, x_max, y_max in stored pixels
  std::vector<int32_t> box_classes;         // detection: one per box
  std::vector<float> box_areas;  // detection: per box its area in original pixels (COCO's 'area'); empty: the boxes'
  std::vector<std::array<float, 4>> crowd_boxes;  // detection: COCO's iscrowd regions, in stored pixels
  std::vector<int32_t> crowd_classes;             // detection: one per crowd region
  std::array<int32_t, 2> original_size{0, 0};     // detection: width, height before letterboxing (0: as stored)
  int64_t image_id = -1;                          // detection: COCO's image id (-1: none)
};

struct ImageGenerator {
  std::string kind = "image_text";  // or "detection"
  int64_t count = 0;                // rows
  std::string source;               // what the rows are, as the file records it (e.g. "synthetic/<seed>")
  std::vector<std::string> class_names;
  // Row `index`, called only on the rank that writes it: a function of the index alone. A row that
  // throws is skipped and reported, as an unreadable input is; a UserError stops the prep on every rank.
  std::function<GeneratedImage(int64_t index)> make;
  // image_text without options.tokenizer: the captions a tokenizer is trained on (rank 0 only).
  std::function<std::vector<std::string>()> tokenizer_corpus;
};

// One exchange of a text document: tokens [bos] + ids(prompt + response) + [eos], the joined text
// tokenised at once as Hugging Face fine-tuning scripts do; the first len(ids(prompt)) tokens (and
// bos) carry no loss, the rest and eos do. Plain text has an empty prompt.
struct TextExchange {
  std::string prompt, response;
  // The bos before it: as tokenizer(text) adds one (Tokenizer::adds_bos: add_bos_token), a chat
  // template's literal bos_token (always), or none (a template with one bos at the start only).
  enum class Bos { kTokenizer, kAlways, kNone } bos = Bos::kTokenizer;
};

// One document: its exchanges in order (one for an instruction or plain text, one per assistant
// turn for a chat).
struct TextRecord {
  std::vector<TextExchange> exchanges;
};

// A chat ({"role", "content"} messages: an optional system message, then user and assistant
// alternating, ending with an assistant) as exchanges in `chat_template`'s text:
//   llama-2: prompt "[INST] " + content + " [/INST]" with "<<SYS>>\n" + system + "\n<</SYS>>\n\n"
//            before the first user content (contents stripped), response " " + answer + " "
//            (transformers' Llama-2 chat template; bos and eos around each exchange).
//   mistral: prompt "[INST] " + content + " [/INST]", response the answer as it is, eos after each
//            answer, bos before the first exchange only; no system message (Mistral-7B-Instruct's
//            chat template: bos, then '[INST] ' + user + ' [/INST]' + answer + eos per exchange).
// UserError (the caller names the file and record) for an unknown template, a role out of order,
// or a chat that does not end with an assistant message.
struct ChatMessage {
  std::string role, content;
};
std::vector<TextExchange> chat_exchanges(const std::vector<ChatMessage>& messages, const std::string& chat_template);
// UserError naming the built-in templates unless `name` is one of them.
void check_chat_template(const std::string& name);

struct TextGenerator {
  int64_t count = 0;
  std::string source;                             // what the records are, for messages
  std::function<TextRecord(int64_t index)> make;  // on the rank that writes it: a function of the index
  std::function<std::vector<std::string>()> tokenizer_corpus;
};

// Collective, as the prep_* above: writes options.out from `generator`'s rows. UserError on every
// rank for bad options (checked as for the other kinds) or a failing row.
PrepReport prep_generated_images(const comm::Runtime& runtime, const PrepCommon& options,
                                 const ImageGenerator& generator);
PrepReport prep_generated_text(const comm::Runtime& runtime, const PrepCommon& options, const TextGenerator& generator);

}  // namespace meridian::data

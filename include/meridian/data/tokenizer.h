// SentencePiece tokenizer as stored in a dataset (/tokenizer/model), so training and evaluation use
// exactly the tokenizer the data was made with. Encoding is const and safe from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace meridian::data {

// The text rules a Hugging Face tokenizer applies around its SentencePiece model (SiglipTokenizer:
// the text lower-cased and canonicalised, its own eos and pad pieces).
struct TextRules {
  bool lower_case = false;  // ASCII letters lower-cased (do_lower_case)
  bool strip_punctuation =
      false;                     // canonicalize_text: ASCII punctuation removed, whitespace runs to one space, trimmed
  int pad_id = -1, eos_id = -1;  // -1: the SentencePiece model's own
  bool add_bos = true;           // bos before each text when the model has one (add_bos_token)
  // Where a "▁" (a space) goes before a section of text, a section being the text before, between or
  // after special tokens. kModel: SentencePiece's own dummy prefix, before every section. The others
  // are transformers 5's LlamaTokenizer (tokenizers' Metaspace pre-tokenizer, prepend_scheme): only
  // before a section that does not already start with a space, and kAlways before every section
  // ("legacy": true), kFirst before the input's first only, none after a special token such as a
  // chat template's <s> or </s> (legacy false, transformers 5's default), kNever none
  // (add_prefix_space false).
  enum class Prefix { kModel, kAlways, kFirst, kNever } prefix = Prefix::kModel;
};

class Tokenizer {
 public:
  // From the bytes of a SentencePiece .model file; `origin` names them in errors (DataError).
  static Tokenizer from_bytes(const std::string& model, const std::string& origin);
  static Tokenizer from_file(const std::string& path);
  // A Hugging Face tokenizer directory: spiece.model with the rules of tokenizer_config.json
  // (SiglipTokenizer: do_lower_case, default true; punctuation stripped; eos_token and pad_token,
  // default "</s>", looked up as pieces), or tokenizer.model (LlamaTokenizer as transformers 5 reads
  // the directory: the text unchanged but for the "▁" before each section (TextRules::prefix, from
  // legacy and add_prefix_space); bos the model's, which bos_token must name, added when
  // tokenizer.json's post_processor writes it (tokenizer.json present: add_bos_token is not read),
  // else when add_bos_token is true (default false); eos_token, default "</s>"; pad_token when not
  // null).
  // DataError naming the file and field when both models are missing (tokenizer.json alone is not
  // read), the config is not JSON, or a token is no piece.
  static Tokenizer from_hf_dir(const std::string& dir);
  // This tokenizer with other rules (the model is shared).
  Tokenizer with_rules(const TextRules& rules) const;
  const TextRules& rules() const { return rules_; }
  int piece_id(const std::string& piece) const;  // -1 when the model has no such piece
  std::string piece(int id) const;               // "" out of range
  // Trains a unigram model on `sentences` (pad 0, unk 1, bos 2, eos 3). `vocab_size` is an upper
  // bound: a small corpus gets fewer pieces rather than an error. Deterministic for its input.
  // keep_whitespace (for language-model text): no normalisation, newlines and runs of spaces kept,
  // unknown characters as bytes.
  static Tokenizer train(const std::vector<std::string>& sentences, int vocab_size, bool keep_whitespace = false);

  // Writes the ids of `text` (after the rules) then eos into out[0..context_length), truncating the text so eos stays
  // last, and pads with pad_id(). Returns the length before padding (<= context_length).
  int encode(const std::string& text, int context_length, int32_t* out) const;
  // Stops at eos/pad. With a prefix rule (TextRules::prefix not kModel): as transformers 5's
  // LlamaTokenizer.decode(skip_special_tokens=True), else SentencePiece's own decoding (they differ
  // on byte pieces that are not UTF-8: one U+FFFD per byte here).
  std::string decode(const int32_t* ids, int length) const;

  int vocab_size() const;
  int pad_id() const;  // the rules' pad, else the model's pad piece, or 0 when it has none
  int eos_id() const;  // the rules' eos, else the model's; -1 when it has none (then nothing is appended)
  int bos_id() const;  // -1 when the model has none
  // Whether a bos goes before each text (the model has one and TextRules::add_bos).
  bool adds_bos() const { return rules_.add_bos && bos_id() >= 0; }
  // The pieces of `text`, nothing added; after_special: the text follows a special token (a chat
  // template's bos or eos), which decides the "▁" before it (TextRules::prefix).
  std::vector<int32_t> ids(const std::string& text, bool after_special = false) const;
  const std::string& model_bytes() const { return bytes_; }

 private:
  std::string metaspace_decode(const std::vector<int32_t>& ids) const;
  struct Model;
  std::shared_ptr<Model> model_;
  std::string bytes_;
  TextRules rules_;
};

}  // namespace meridian::data

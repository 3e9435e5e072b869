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
};

class Tokenizer {
 public:
  // From the bytes of a SentencePiece .model file; `origin` names them in errors (DataError).
  static Tokenizer from_bytes(const std::string& model, const std::string& origin);
  static Tokenizer from_file(const std::string& path);
  // A Hugging Face tokenizer directory: spiece.model with the rules of tokenizer_config.json
  // (SiglipTokenizer: do_lower_case, default true; punctuation stripped; eos_token and pad_token,
  // default "</s>", looked up as pieces), or tokenizer.model (LlamaTokenizer: the text unchanged;
  // bos the model's, which bos_token must name, added unless add_bos_token is false; eos_token,
  // default "</s>"; pad_token when not null).
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
  std::string decode(const int32_t* ids, int length) const;  // stops at eos/pad

  int vocab_size() const;
  int pad_id() const;  // the rules' pad, else the model's pad piece, or 0 when it has none
  int eos_id() const;  // the rules' eos, else the model's; -1 when it has none (then nothing is appended)
  int bos_id() const;  // -1 when the model has none
  // Whether a bos goes before each text (the model has one and add_bos_token is not false).
  bool adds_bos() const { return rules_.add_bos && bos_id() >= 0; }
  std::vector<int32_t> ids(const std::string& text) const;  // the pieces of `text`, nothing added
  const std::string& model_bytes() const { return bytes_; }

 private:
  struct Model;
  std::shared_ptr<Model> model_;
  std::string bytes_;
  TextRules rules_;
};

}  // namespace meridian::data

#include "meridian/data/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "meridian/core/error.h"
#include "meridian/core/json_file.h"

namespace meridian::data {

namespace {

// SentencePiece lives in its own shared library, loaded in isolation (see spm_shim.cpp for why).
struct Shim {
  void* (*load)(const char*, size_t, char*, size_t);
  void (*free)(void*);
  int (*encode)(void*, const char*, size_t, int32_t*, int);
  size_t (*decode)(void*, const int32_t*, int, char*, size_t);
  int (*piece_size)(void*);
  int (*pad_id)(void*);
  int (*eos_id)(void*);
  int (*bos_id)(void*);
  int (*piece_to_id)(void*, const char*);
  const char* (*id_to_piece)(void*, int);
  int (*train)(const char* const*, size_t, const char*, char**, size_t*, char*, size_t);
  void (*free_buffer)(char*);
};

std::string shim_path() {
  if (const char* env = std::getenv("MERIDIAN_SPM_SHIM")) return env;
  // Next to the executable (installed layout and build/meridian), else where the build put it.
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const auto& dir : {exe.parent_path(), exe.parent_path().parent_path()}) {
      const auto candidate = dir / "libmeridian_spm.so";
      if (std::filesystem::exists(candidate)) return candidate.string();
    }
  }
  return MERIDIAN_SPM_SHIM_PATH;
}

const Shim& shim() {
  static const Shim s = [] {
    const std::string path = shim_path();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!handle) {
      throw SystemError(std::string("cannot load the SentencePiece module ") + path + ": " + dlerror() +
                        " (set MERIDIAN_SPM_SHIM to libmeridian_spm.so)");
    }
    const auto sym = [&](const char* name) {
      void* p = dlsym(handle, name);
      if (!p) throw SystemError(path + ": missing symbol " + name);
      return p;
    };
    Shim r;
    r.load = reinterpret_cast<decltype(r.load)>(sym("mspm_load"));
    r.free = reinterpret_cast<decltype(r.free)>(sym("mspm_free"));
    r.encode = reinterpret_cast<decltype(r.encode)>(sym("mspm_encode"));
    r.decode = reinterpret_cast<decltype(r.decode)>(sym("mspm_decode"));
    r.piece_size = reinterpret_cast<decltype(r.piece_size)>(sym("mspm_piece_size"));
    r.pad_id = reinterpret_cast<decltype(r.pad_id)>(sym("mspm_pad_id"));
    r.eos_id = reinterpret_cast<decltype(r.eos_id)>(sym("mspm_eos_id"));
    r.bos_id = reinterpret_cast<decltype(r.bos_id)>(sym("mspm_bos_id"));
    r.piece_to_id = reinterpret_cast<decltype(r.piece_to_id)>(sym("mspm_piece_to_id"));
    r.id_to_piece = reinterpret_cast<decltype(r.id_to_piece)>(sym("mspm_id_to_piece"));
    r.train = reinterpret_cast<decltype(r.train)>(sym("mspm_train"));
    r.free_buffer = reinterpret_cast<decltype(r.free_buffer)>(sym("mspm_free_buffer"));
    return r;
  }();
  return s;
}

// SiglipTokenizer's text rules (transformers' canonicalize_text after lower-casing).
std::string apply_rules(const std::string& text, const TextRules& rules) {
  if (!rules.lower_case && !rules.strip_punctuation) return text;
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (rules.strip_punctuation && c < 128 && std::ispunct(c)) continue;
    if (rules.strip_punctuation && c < 128 && std::isspace(c)) {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
      continue;
    }
    out.push_back(rules.lower_case && c < 128 ? char(std::tolower(c)) : ch);
  }
  if (rules.strip_punctuation && !out.empty() && out.back() == ' ') out.pop_back();
  return out;
}
}  // namespace

struct Tokenizer::Model {
  void* sp = nullptr;
  ~Model() {
    if (sp) shim().free(sp);
  }
};

Tokenizer Tokenizer::from_bytes(const std::string& model, const std::string& origin) {
  char err[512] = {0};
  void* sp = shim().load(model.data(), model.size(), err, sizeof(err));
  if (!sp) throw DataError(origin, "tokenizer", std::string("not a SentencePiece model: ") + err);
  Tokenizer t;
  t.model_ = std::make_shared<Model>();
  t.model_->sp = sp;
  t.bytes_ = model;
  return t;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path, "tokenizer", "cannot open the file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return from_bytes(buffer.str(), path);
}

Tokenizer Tokenizer::train(const std::vector<std::string>& sentences, int vocab_size, bool keep_whitespace) {
  if (sentences.empty()) throw UserError("tokenizer training: no captions to train on");
  if (vocab_size < 8) throw UserError("--vocab-size: must be at least 8, got " + std::to_string(vocab_size));
  const std::string args =
      "model_type=unigram\nvocab_size=" + std::to_string(vocab_size) +
      "\nhard_vocab_limit=false\npad_id=0\nunk_id=1\nbos_id=2\neos_id=3\n"
      "character_coverage=1.0\nnum_threads=1\ninput_sentence_size=2000000\n"
      "shuffle_input_sentence=false\nminloglevel=2\n" +
      std::string(keep_whitespace ? "normalization_rule_name=identity\nremove_extra_whitespaces=false\n"
                                    "split_by_whitespace=true\nbyte_fallback=true\n"
                                  : "");
  std::vector<const char*> ptrs;
  for (const auto& s : sentences) ptrs.push_back(s.c_str());
  char* model = nullptr;
  size_t len = 0;
  char err[512] = {0};
  if (!shim().train(ptrs.data(), ptrs.size(), args.c_str(), &model, &len, err, sizeof(err)))
    throw UserError(std::string("tokenizer training failed: ") + err);
  std::string bytes(model, len);
  shim().free_buffer(model);
  return from_bytes(bytes, "trained tokenizer");
}

int Tokenizer::encode(const std::string& raw, int context_length, int32_t* out) const {
  const std::string text = apply_rules(raw, rules_);
  std::vector<int32_t> ids(std::max(context_length, 1));
  int n = shim().encode(model_->sp, text.data(), text.size(), ids.data(), int(ids.size()));
  const int eos = eos_id();
  const int room = context_length - (eos >= 0 ? 1 : 0);
  n = std::max(0, std::min(n, room));
  if (eos >= 0 && context_length > 0) ids[n++] = eos;
  for (int i = 0; i < context_length; ++i) out[i] = i < n ? ids[i] : pad_id();
  return n;
}

std::string Tokenizer::decode(const int32_t* ids, int length) const {
  std::vector<int32_t> v;
  const int raw_pad = shim().pad_id(model_->sp);
  for (int i = 0; i < length; ++i) {
    if (ids[i] == eos_id() || ids[i] == raw_pad) break;
    v.push_back(ids[i]);
  }
  std::string text(4 * v.size() + 16, '\0');
  size_t n = shim().decode(model_->sp, v.data(), int(v.size()), text.data(), text.size());
  if (n > text.size()) {
    text.resize(n);
    n = shim().decode(model_->sp, v.data(), int(v.size()), text.data(), text.size());
  }
  text.resize(n);
  return text;
}

int Tokenizer::vocab_size() const { return shim().piece_size(model_->sp); }
int Tokenizer::pad_id() const {
  if (rules_.pad_id >= 0) return rules_.pad_id;
  const int p = shim().pad_id(model_->sp);
  return p >= 0 ? p : 0;
}
int Tokenizer::eos_id() const { return rules_.eos_id >= 0 ? rules_.eos_id : shim().eos_id(model_->sp); }

int Tokenizer::piece_id(const std::string& piece) const { return shim().piece_to_id(model_->sp, piece.c_str()); }

std::string Tokenizer::piece(int id) const { return shim().id_to_piece(model_->sp, id); }

Tokenizer Tokenizer::with_rules(const TextRules& rules) const {
  Tokenizer t = *this;
  t.rules_ = rules;
  return t;
}

Tokenizer Tokenizer::from_hf_dir(const std::string& dir) {
  const std::string siglip = (std::filesystem::path(dir) / "spiece.model").string();
  const std::string llama = (std::filesystem::path(dir) / "tokenizer.model").string();
  const std::string config_path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  const bool is_llama = !std::filesystem::exists(siglip) && std::filesystem::exists(llama);
  if (!is_llama && !std::filesystem::exists(siglip))
    throw DataError(dir, "tokenizer",
                    "neither spiece.model (a SiglipTokenizer's SentencePiece model) nor tokenizer.model (a "
                    "LlamaTokenizer's) is in the directory (tokenizer.json alone is not read)");
  const std::string model = is_llama ? llama : siglip;
  Tokenizer t = from_file(model);
  const nlohmann::json config = std::filesystem::exists(config_path) ? read_json_object(config_path, "tokenizer config")
                                                                     : nlohmann::json::object();
  // A token is a string or an AddedToken object {"content": "</s>", ...}; null: none.
  const auto piece = [&](const char* field) {
    const auto it = config.find(field);
    std::string text = "</s>";
    if (it != config.end() && it->is_null()) return -1;
    if (it != config.end()) {
      if (it->is_string())
        text = it->get<std::string>();
      else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        text = (*it)["content"].get<std::string>();
      else
        throw DataError(config_path, field, "is neither a string nor an object with \"content\"");
    }
    const int id = t.piece_id(text);
    if (id < 0) throw DataError(config_path, field, "'" + text + "' is not a piece of " + model);
    return id;
  };
  TextRules rules;
  if (is_llama) {  // LlamaTokenizer: the text as it is; bos from the model (tokenizer_config's bos_token checked)
    rules.eos_id = piece("eos_token");
    if (rules.eos_id < 0) throw DataError(config_path, "eos_token", "is null: fine-tuning needs an end of sequence");
    if (config.contains("bos_token") && piece("bos_token") != t.bos_id())
      throw DataError(config_path, "bos_token", "is not the bos piece of " + model);
    const auto add_bos = config.find("add_bos_token");  // LlamaTokenizer's default: true
    if (add_bos != config.end() && !add_bos->is_null()) {
      if (!add_bos->is_boolean()) throw DataError(config_path, "add_bos_token", "is not true or false");
      rules.add_bos = add_bos->get<bool>();
    }
    // A pad added on top of the model (e.g. "<pad>" as id 32000) is no piece: prep pads nothing, so the
    // model's own pad (or 0) stays.
    const auto pad = config.find("pad_token");
    if (pad != config.end() && (pad->is_string() || pad->is_object())) {
      const std::string text = pad->is_string() ? pad->get<std::string>() : pad->value("content", std::string());
      if (t.piece_id(text) >= 0) rules.pad_id = t.piece_id(text);
    }
    return t.with_rules(rules);
  }
  const auto lower = config.find("do_lower_case");
  rules.lower_case = lower == config.end() || !lower->is_boolean() || lower->get<bool>();
  rules.strip_punctuation = true;
  rules.eos_id = piece("eos_token");
  rules.pad_id = piece("pad_token");
  return t.with_rules(rules);
}
int Tokenizer::bos_id() const { return shim().bos_id(model_->sp); }

std::vector<int32_t> Tokenizer::ids(const std::string& text) const {
  std::vector<int32_t> out(text.size() + 16);
  const int n = shim().encode(model_->sp, text.data(), text.size(), out.data(), int(out.size()));
  if (n > int(out.size())) {
    out.resize(n);
    shim().encode(model_->sp, text.data(), text.size(), out.data(), n);
  }
  out.resize(n);
  return out;
}

}  // namespace meridian::data

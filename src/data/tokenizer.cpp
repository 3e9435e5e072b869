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
#ifdef MERIDIAN_SANITIZE
    // Sanitizer builds: the sanitizers refuse RTLD_DEEPBIND, so the (uninstrumented) module gets a
    // link-map namespace of its own, with its own copies of the C++ runtime and protobuf.
    void* handle = dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
#else
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
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
// The SentencePiece model `bytes` with normalizer_spec.add_dummy_prefix false: protobuf merges a
// repeated embedded message field into the one before, so the field appended (ModelProto field 3,
// NormalizerSpec; its field 3, add_dummy_prefix, = 0) overrides that one flag.
void* without_dummy_prefix(const std::string& bytes, const std::string& origin) {
  const std::string patched = bytes + std::string("\x1a\x02\x18\x00", 4);
  char err[512] = {0};
  void* sp = shim().load(patched.data(), patched.size(), err, sizeof(err));
  if (!sp) throw DataError(origin, "tokenizer", std::string("not a SentencePiece model: ") + err);
  return sp;
}

// Whether tokenizer.json's post_processor (a TemplateProcessing, alone or in a Sequence) puts the
// special token `bos` before the text: what tokenizer(text) adds in transformers 5.
bool post_processor_adds_bos(const std::string& path, const std::string& bos) {
  const nlohmann::json j = read_json_object(path, "tokenizer");
  const auto it = j.find("post_processor");
  if (it == j.end() || it->is_null()) return false;
  std::vector<nlohmann::json> processors{*it};
  if (it->value("type", std::string()) == "Sequence" && it->contains("processors"))
    processors = (*it)["processors"].get<std::vector<nlohmann::json>>();
  for (const auto& p : processors) {
    if (!p.is_object() || p.value("type", std::string()) != "TemplateProcessing" || !p.contains("single")) continue;
    if (!p["single"].is_array()) throw DataError(path, "post_processor.single", "is not a list");
    for (const auto& part : p["single"]) {
      if (part.contains("Sequence")) break;  // the text itself: what came before it is all
      if (part.contains("SpecialToken") && part["SpecialToken"].value("id", std::string()) == bos) return true;
    }
  }
  return false;
}

// Whether `s` is UTF-8 as Rust's String::from_utf8 takes it (no overlong forms, surrogates or
// code points above U+10FFFF).
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b >> 6) != 0x2) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

}  // namespace

struct Tokenizer::Model {
  void* sp = nullptr;
  void* raw = nullptr;  // the same model without SentencePiece's dummy prefix (TextRules::prefix not kModel)
  ~Model() {
    if (sp) shim().free(sp);
    if (raw) shim().free(raw);
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
  if (rules_.prefix != TextRules::Prefix::kModel) return metaspace_decode(v);
  std::string text(4 * v.size() + 16, '\0');
  size_t n = shim().decode(model_->sp, v.data(), int(v.size()), text.data(), text.size());
  if (n > text.size()) {
    text.resize(n);
    n = shim().decode(model_->sp, v.data(), int(v.size()), text.data(), text.size());
  }
  text.resize(n);
  return text;
}

// transformers 5's LlamaTokenizer.decode(ids, skip_special_tokens=True): special tokens (bos, unk)
// left out, "▁" as a space, each run of byte pieces <0xNN> as its bytes when they are valid UTF-8,
// else one U+FFFD per byte (tokenizers' ByteFallback), then one leading space removed (Strip).
std::string Tokenizer::metaspace_decode(const std::vector<int32_t>& ids) const {
  std::string out, bytes;
  const auto flush = [&] {
    if (valid_utf8(bytes)) {
      out += bytes;
    } else {
      for (size_t i = 0; i < bytes.size(); ++i) out += "\xef\xbf\xbd";
    }
    bytes.clear();
  };
  const int unk = piece_id("<unk>");
  for (const int32_t id : ids) {
    if (id == bos_id() || (unk >= 0 && id == unk)) continue;
    const std::string p = piece(id);
    if (p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>' &&
        std::isxdigit(static_cast<unsigned char>(p[3])) && std::isxdigit(static_cast<unsigned char>(p[4]))) {
      bytes.push_back(char(std::stoi(p.substr(3, 2), nullptr, 16)));
      continue;
    }
    flush();
    for (size_t at = 0; at < p.size();) {
      if (p.compare(at, 3, "\xe2\x96\x81") == 0) {
        out.push_back(' '), at += 3;
      } else {
        out.push_back(p[at++]);
      }
    }
  }
  flush();
  if (rules_.prefix != TextRules::Prefix::kNever && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
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
  if (rules.prefix != TextRules::Prefix::kModel && !t.model_->raw) {  // its own model, the one shared unchanged
    auto m = std::make_shared<Model>();
    m->sp = shim().load(bytes_.data(), bytes_.size(), nullptr, 0);
    if (!m->sp) throw DataError("tokenizer", "model", "cannot be loaded again");
    m->raw = without_dummy_prefix(bytes_, "tokenizer");
    t.model_ = m;
  }
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
  const auto flag = [&](const char* field, bool fallback) {
    const auto it = config.find(field);
    if (it == config.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw DataError(config_path, field, "is not true or false");
    return it->get<bool>();
  };
  TextRules rules;
  if (is_llama) {  // LlamaTokenizer: the text as it is; bos from the model (tokenizer_config's bos_token checked)
    rules.eos_id = piece("eos_token");
    if (rules.eos_id < 0) throw DataError(config_path, "eos_token", "is null: fine-tuning needs an end of sequence");
    if (config.contains("bos_token") && piece("bos_token") != t.bos_id())
      throw DataError(config_path, "bos_token", "is not the bos piece of " + model);
    // As transformers 5: tokenizer.json's post-processor says whether bos goes first (add_bos_token
    // of tokenizer_config.json is then not read); without it add_bos_token, default false.
    const std::string fast = (std::filesystem::path(dir) / "tokenizer.json").string();
    rules.add_bos = std::filesystem::exists(fast) ? post_processor_adds_bos(fast, t.piece(t.bos_id()))
                                                  : flag("add_bos_token", false);
    // The "▁" before each section (tokenizers' Metaspace as LlamaTokenizer builds it).
    rules.prefix = !flag("add_prefix_space", true) ? TextRules::Prefix::kNever
                   : flag("legacy", false)         ? TextRules::Prefix::kAlways
                                                   : TextRules::Prefix::kFirst;

    // A pad added on top of the model (e.g. "<pad>" as id 32000) is no piece: prep pads nothing, so the
    // model's own pad (or 0) stays.
    const auto pad = config.find("pad_token");
    if (pad != config.end() && (pad->is_string() || pad->is_object())) {
      const std::string text = pad->is_string() ? pad->get<std::string>() : pad->value("content", std::string());
      if (t.piece_id(text) >= 0) rules.pad_id = t.piece_id(text);
    }
    return t.with_rules(rules);  // with the model without its dummy prefix (Tokenizer::ids)
  }
  const auto lower = config.find("do_lower_case");
  rules.lower_case = lower == config.end() || !lower->is_boolean() || lower->get<bool>();
  rules.strip_punctuation = true;
  rules.eos_id = piece("eos_token");
  rules.pad_id = piece("pad_token");
  return t.with_rules(rules);
}
int Tokenizer::bos_id() const { return shim().bos_id(model_->sp); }

std::vector<int32_t> Tokenizer::ids(const std::string& raw_text, bool after_special) const {
  void* sp = model_->sp;
  std::string text = raw_text;
  if (rules_.prefix != TextRules::Prefix::kModel && model_->raw) {
    // Metaspace: "▁" first unless the text starts with one (a space) or the scheme puts none here.
    sp = model_->raw;
    const bool starts_with_space = text.rfind(' ', 0) == 0 || text.rfind("\xe2\x96\x81", 0) == 0;
    const bool prepend =
        rules_.prefix == TextRules::Prefix::kAlways || (rules_.prefix == TextRules::Prefix::kFirst && !after_special);
    if (!text.empty() && !starts_with_space && prepend) text = " " + text;
  }
  std::vector<int32_t> out(text.size() + 16);
  const int n = shim().encode(sp, text.data(), text.size(), out.data(), int(out.size()));
  if (n > int(out.size())) {
    out.resize(n);
    shim().encode(sp, text.data(), text.size(), out.data(), n);
  }
  out.resize(n);
  return out;
}

}  // namespace meridian::data

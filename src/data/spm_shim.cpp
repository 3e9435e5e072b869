// A C interface to SentencePiece, built as its own shared library and loaded with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND) by tokenizer.cpp.
//
// Why: Debian's libsentencepiece embeds its own copy of protobuf and exports its symbols; linked into
// the same process as LibTorch (which loads the system libprotobuf) the two copies bind to each other
// and the process crashes at start-up. Loaded this way, SentencePiece resolves protobuf within itself
// and nothing else sees its copy.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {
void set_error(char* err, size_t cap, const std::string& message) {
  if (err && cap) std::snprintf(err, cap, "%s", message.c_str());
}

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  VectorIterator(const char* const* s, size_t n) : s_(s), n_(n) { load(); }
  bool done() const override { return i_ >= n_; }
  void Next() override { ++i_, load(); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load() {
    if (i_ < n_) value_ = s_[i_];
  }
  const char* const* s_;
  size_t n_, i_ = 0;
  std::string value_;
};
}  // namespace

extern "C" {

void* mspm_load(const char* bytes, size_t n, char* err, size_t errn) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const auto status = sp->LoadFromSerializedProto(std::string(bytes, n));
  if (!status.ok()) {
    set_error(err, errn, status.ToString());
    delete sp;
    return nullptr;
  }
  return sp;
}

void mspm_free(void* sp) { delete static_cast<sentencepiece::SentencePieceProcessor*>(sp); }

// Writes up to `cap` ids; returns how many the text has.
int mspm_encode(void* sp, const char* text, size_t n, int32_t* out, int cap) {
  std::vector<int> ids;
  static_cast<sentencepiece::SentencePieceProcessor*>(sp)->Encode(std::string(text, n), &ids);
  for (int i = 0; i < cap && i < int(ids.size()); ++i) out[i] = ids[i];
  return int(ids.size());
}

// Writes up to `cap` bytes (no terminator); returns the decoded length.
size_t mspm_decode(void* sp, const int32_t* ids, int n, char* out, size_t cap) {
  std::vector<int> v(ids, ids + n);
  std::string text;
  static_cast<sentencepiece::SentencePieceProcessor*>(sp)->Decode(v, &text);
  std::memcpy(out, text.data(), std::min(cap, text.size()));
  return text.size();
}

int mspm_piece_size(void* sp) { return static_cast<sentencepiece::SentencePieceProcessor*>(sp)->GetPieceSize(); }
int mspm_pad_id(void* sp) { return static_cast<sentencepiece::SentencePieceProcessor*>(sp)->pad_id(); }
int mspm_eos_id(void* sp) { return static_cast<sentencepiece::SentencePieceProcessor*>(sp)->eos_id(); }
int mspm_bos_id(void* sp) { return static_cast<sentencepiece::SentencePieceProcessor*>(sp)->bos_id(); }
// The piece of `id` ("" out of range).
const char* mspm_id_to_piece(void* sp, int id) {
  auto* p = static_cast<sentencepiece::SentencePieceProcessor*>(sp);
  if (id < 0 || id >= p->GetPieceSize()) return "";
  return p->IdToPiece(id).c_str();
}
// The id of `piece`, -1 when the model has no such piece (SentencePiece itself would answer unk).
int mspm_piece_to_id(void* sp, const char* piece) {
  auto* p = static_cast<sentencepiece::SentencePieceProcessor*>(sp);
  const int id = p->PieceToId(piece);
  return id == p->unk_id() && p->IdToPiece(id) != piece ? -1 : id;
}

// `args`: "key=value" lines. On success *model (free with mspm_free_buffer) holds the model bytes.
int mspm_train(const char* const* sentences, size_t n, const char* args, char** model, size_t* model_len, char* err,
               size_t errn) {
  std::unordered_map<std::string, std::string> kwargs;
  std::stringstream ss(args);
  std::string line;
  while (std::getline(ss, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) kwargs[line.substr(0, eq)] = line.substr(eq + 1);
  }
  VectorIterator it(sentences, n);
  std::string out;
  const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, &out);
  if (!status.ok()) {
    set_error(err, errn, status.ToString());
    return 0;
  }
  *model = static_cast<char*>(std::malloc(out.size()));
  std::memcpy(*model, out.data(), out.size());
  *model_len = out.size();
  return 1;
}

void mspm_free_buffer(char* p) { std::free(p); }

}  // extern "C"

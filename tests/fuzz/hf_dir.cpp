// A Hugging Face model directory (--model DIR, task.init DIR): config.json, the shard index
// model.safetensors.index.json, tokenizer_config.json and preprocessor_config.json, as SigLIP and
// Llama directories have them. The first byte chooses the family and which file holds the input; the
// others are from a small model saved by transformers (tests/fuzz/base/{siglip,llama}).
#include <filesystem>

#include "fuzz.h"
#include "meridian/data/image_input.h"
#include "meridian/data/tokenizer.h"
#include "meridian/models/hf_checkpoint.h"
#include "meridian/models/llama.h"
#include "meridian/tasks/model_source.h"
#include "meridian/tasks/siglip_hf.h"

using namespace meridian;
namespace fs = std::filesystem;

MERIDIAN_FUZZ_TARGET(hf_dir) {
  static const char* families[] = {"siglip", "llama"};
  static const char* files[] = {"config.json", "model.safetensors.index.json", "tokenizer_config.json",
                                "preprocessor_config.json"};
  const size_t c = fuzz::take_choice(bytes, 8);
  const std::string family = families[c % 2], file = files[c / 2];
  const std::string dir = fuzz::scratch() + "/" + family;
  static bool copied[2] = {false, false};
  if (!copied[c % 2]) fuzz::copy_dir(std::string(MERIDIAN_FUZZ_BASE "/") + family, family);
  copied[c % 2] = true;
  // The input replaces one file; the original is written back (or the file removed) after.
  const std::string base_file = std::string(MERIDIAN_FUZZ_BASE "/") + family + "/" + file;
  const bool existed = fs::exists(base_file);
  struct Restore {
    std::string name, original;
    bool existed;
    std::error_code ec;
    ~Restore() {
      if (existed)
        fuzz::write(name, original);
      else
        fs::remove(fuzz::scratch() + "/" + name, ec);
    }
  } restore{family + "/" + file, existed ? fuzz::read(base_file) : std::string(), existed};
  fuzz::write(family + "/" + file, bytes);

  const tasks::ModelSource source = tasks::open_model(dir, "eval");
  if (family == "siglip")
    tasks::siglip_config(source);
  else
    models::LlamaConfig::from_config(source.config);
  models::open_hf_checkpoint(dir);
  data::Tokenizer::from_hf_dir(dir);
  if (family == "siglip") data::ImageProcessing::from_hf_file(dir + "/preprocessor_config.json");
}

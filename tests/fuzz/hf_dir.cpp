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
  if (!copied[c % 2]) fs::copy(std::string(MERIDIAN_FUZZ_BASE "/") + family, dir, fs::copy_options::recursive);
  copied[c % 2] = true;
  const std::string original = fuzz::scratch() + "/original";
  const bool existed = fs::exists(dir + "/" + file);
  if (existed) fs::copy_file(dir + "/" + file, original, fs::copy_options::overwrite_existing);
  fuzz::write(family + "/" + file, bytes);
  struct Restore {
    std::string from, to;
    bool existed;
    ~Restore() {
      if (existed)
        fs::copy_file(from, to, fs::copy_options::overwrite_existing);
      else
        fs::remove(to);
    }
  } restore{original, dir + "/" + file, existed};

  const tasks::ModelSource source = tasks::open_model(dir, "eval");
  if (family == "siglip")
    tasks::siglip_config(source);
  else
    models::LlamaConfig::from_config(source.config);
  models::open_hf_checkpoint(dir);
  data::Tokenizer::from_hf_dir(dir);
  if (family == "siglip") data::ImageProcessing::from_hf_file(dir + "/preprocessor_config.json");
}

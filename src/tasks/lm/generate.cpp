// The lm task's `meridian generate`: a prompt continued by a checkpoint's Llama (LoRA adapters as
// trained), with the tokenizer of its training data or one the user names.
#include "meridian/models/generate.h"

#include "meridian/data/format.h"
#include "meridian/data/prep.h"
#include "meridian/data/tokenizer.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/tasks/registry.h"

namespace meridian::tasks {

namespace {

data::Tokenizer load_tokenizer(const std::string& path) {
  if (path.size() > 3 && path.substr(path.size() - 3) == ".h5") return data::dataset_tokenizer(path);
  return data::Tokenizer::from_file(path);
}

}  // namespace

GenerateResult generate_lm(const std::string& checkpoint, const GenerateOptions& o, const c10::Device& device) {
  Config config;
  models::Llama model = load_lm(checkpoint, &config);
  std::string tokenizer_path = o.tokenizer;
  if (tokenizer_path.empty()) tokenizer_path = DataSettings::from_config(config).train;
  if (tokenizer_path.empty())
    throw UserError("generate: give --tokenizer (the checkpoint's config names no data.train)");
  const data::Tokenizer tok = load_tokenizer(tokenizer_path);
  model->to(device);
  model->eval();

  GenerateResult r;
  r.prompt = o.raw ? o.prompt : data::alpaca_prompt(o.prompt, o.input);
  std::vector<int64_t> ids;
  if (tok.adds_bos()) ids.push_back(tok.bos_id());
  for (int32_t id : tok.ids(r.prompt)) ids.push_back(id);
  r.prompt_tokens = int64_t(ids.size());
  models::SamplingOptions so;
  so.max_new_tokens = o.max_new_tokens;
  so.top_p = o.top_p;
  so.temperature = o.temperature;
  so.seed = o.seed;
  so.eos_id = tok.eos_id();
  std::vector<int32_t> generated;
  for (int64_t id : models::generate(model, ids, so)) generated.push_back(int32_t(id));
  r.tokens = int64_t(generated.size());
  r.text = tok.decode(generated.data(), int(generated.size()));
  return r;
}

}  // namespace meridian::tasks

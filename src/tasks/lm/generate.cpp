// The lm task's `meridian generate`: a prompt continued by a checkpoint's Llama (LoRA adapters as
// trained) or a published one, with the tokenizer of its directory, of its training data, or one the
// user names.
#include "meridian/models/generate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "meridian/data/format.h"
#include "meridian/data/prep.h"
#include "meridian/data/tokenizer.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/tasks/registry.h"

namespace meridian::tasks {

namespace {

data::Tokenizer load_tokenizer(const std::string& path) {
  if (std::filesystem::is_directory(path)) return data::Tokenizer::from_hf_dir(path);
  if (path.size() > 3 && path.substr(path.size() - 3) == ".h5") return data::dataset_tokenizer(path);
  return data::Tokenizer::from_file(path);
}

// The prompt as `chat_template` puts it to the model (one user turn, no system prompt):
//   alpaca          the template prep text trains with (data::alpaca_prompt)
//   llama-2         "[INST] {prompt, trimmed} [/INST]" (Llama-2-chat's, after its bos_token)
//   mistral         "[INST] {prompt} [/INST]" (Mistral-Instruct's; the same for one turn)
//   none            the text itself
std::string templated(const std::string& chat_template, const std::string& prompt, const std::string& input) {
  const std::string text = input.empty() ? prompt : prompt + "\n\n" + input;
  if (chat_template == "alpaca") return data::alpaca_prompt(prompt, input);
  if (chat_template == "llama-2") {
    const size_t a = text.find_first_not_of(" \t\n\r"), b = text.find_last_not_of(" \t\n\r");
    return "[INST] " + (a == std::string::npos ? "" : text.substr(a, b - a + 1)) + " [/INST]";
  }
  if (chat_template == "mistral") return "[INST] " + text + " [/INST]";
  if (chat_template == "none") return text;
  throw UserError("generate: --chat-template must be alpaca, llama-2, mistral or none, got '" + chat_template + "'");
}

}  // namespace

GenerateResult generate_lm(const ModelSource& source, const GenerateOptions& o, const c10::Device& device) {
  const std::string chat_template = !o.chat_template.empty() ? o.chat_template : source.published ? "none" : "alpaca";
  GenerateResult r;
  r.prompt = templated(chat_template, o.prompt, o.input);
  std::string tokenizer_path = o.tokenizer;
  if (tokenizer_path.empty())
    tokenizer_path = source.published ? source.path : DataSettings::from_config(source.config).train;
  if (tokenizer_path.empty())
    throw UserError("generate: give --tokenizer (the checkpoint's config names no data.train)");
  const data::Tokenizer tok = load_tokenizer(tokenizer_path);
  models::Llama model = lm_model(source, device, false);
  model->eval();

  // A chat template writes its bos_token itself, the text after it (apply_chat_template); otherwise
  // the prompt is tokenizer(text), with the bos the tokenizer adds.
  const bool chat = chat_template == "llama-2" || chat_template == "mistral";
  std::vector<int64_t> ids;
  if (chat ? tok.bos_id() >= 0 : tok.adds_bos()) ids.push_back(tok.bos_id());
  for (int32_t id : tok.ids(r.prompt, /*after_special=*/chat && tok.bos_id() >= 0)) ids.push_back(id);
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
  spdlog::debug("generate: token ids of the prompt [{}], generated [{}]", fmt::join(ids, ", "),
                fmt::join(generated, ", "));
  r.text = tok.decode(generated.data(), int(generated.size()));
  return r;
}

}  // namespace meridian::tasks

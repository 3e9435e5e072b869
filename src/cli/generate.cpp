// `meridian generate`: continue a prompt with a language-model checkpoint (task lm), greedily or by
// top-p sampling, to see what the model learnt. Runs on rank 0 (other ranks return at once).
#include "meridian/models/generate.h"

#include <cstdio>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/format.h"
#include "meridian/data/prep.h"
#include "meridian/data/tokenizer.h"
#include "meridian/tasks/lm_task.h"
#include "meridian/tasks/registry.h"

namespace meridian::cli {

namespace {

data::Tokenizer load_tokenizer(const std::string& path) {
  if (path.size() > 3 && path.substr(path.size() - 3) == ".h5") return data::dataset_tokenizer(path);
  return data::Tokenizer::from_file(path);
}

}  // namespace

Command generate_command() {
  Command c;
  c.name = "generate";
  c.summary = "Continue a prompt with a language-model checkpoint (greedy or top-p sampling)";
  c.add_options = [](cxxopts::Options& o) {
    // clang-format off
    o.add_options()
        ("checkpoint", "Checkpoint of an lm run (<run>/checkpoints/step_*.h5)", cxxopts::value<std::string>()->default_value(""))
        ("prompt", "The instruction (put in the Alpaca template the training data used, unless --raw)", cxxopts::value<std::string>()->default_value(""))
        ("input", "Optional input for the instruction", cxxopts::value<std::string>()->default_value(""))
        ("raw", "Use --prompt as the text itself, without the template")
        ("tokenizer", "A dataset .h5 or SentencePiece .model; default: the training data named in the checkpoint's config", cxxopts::value<std::string>()->default_value(""))
        ("max-new-tokens", "Tokens to generate at most (stops at eos)", cxxopts::value<int>()->default_value("64"))
        ("top-p", "Nucleus sampling mass; 0: greedy", cxxopts::value<double>()->default_value("0"))
        ("temperature", "Softmax temperature for sampling", cxxopts::value<double>()->default_value("1.0"))
        ("seed", "Sampling seed", cxxopts::value<uint64_t>()->default_value("0"));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    const std::string path = p["checkpoint"].as<std::string>(), prompt = p["prompt"].as<std::string>();
    const int max_new = p["max-new-tokens"].as<int>();
    const double top_p = p["top-p"].as<double>(), temperature = p["temperature"].as<double>();
    if (path.empty()) throw UserError("generate: --checkpoint is required");
    if (prompt.empty()) throw UserError("generate: --prompt is required");
    if (max_new < 1) throw UserError("generate: --max-new-tokens must be at least 1");
    if (top_p < 0 || top_p > 1) throw UserError("generate: --top-p must be within [0, 1]");
    if (!(temperature > 0)) throw UserError("generate: --temperature must be > 0");
    if (rt.rank() != 0) return 0;

    // The run's model, with its LoRA adapters when it trained some.
    Config config;
    models::Llama model = tasks::load_lm(path, &config);
    std::string tokenizer_path = p["tokenizer"].as<std::string>();
    if (tokenizer_path.empty()) tokenizer_path = tasks::DataSettings::from_config(config).train;
    if (tokenizer_path.empty())
      throw UserError("generate: give --tokenizer (the checkpoint's config names no data.train)");
    const data::Tokenizer tok = load_tokenizer(tokenizer_path);

    model->to(rt.device());
    model->eval();

    const std::string text = p.count("raw") ? prompt : data::alpaca_prompt(prompt, p["input"].as<std::string>());
    std::vector<int64_t> ids;
    if (tok.adds_bos()) ids.push_back(tok.bos_id());
    for (int32_t id : tok.ids(text)) ids.push_back(id);
    const size_t prompt_tokens = ids.size();
    models::SamplingOptions so;
    so.max_new_tokens = max_new;
    so.top_p = top_p;
    so.temperature = temperature;
    so.seed = p["seed"].as<uint64_t>();
    so.eos_id = tok.eos_id();
    std::vector<int32_t> generated;
    for (int64_t id : models::generate(model, ids, so)) generated.push_back(int32_t(id));
    std::printf("prompt (%zu tokens): %s\n", prompt_tokens, text.c_str());
    std::printf("generated (%zu tokens, %s): %s\n", generated.size(),
                top_p > 0 ? ("top-p " + std::to_string(top_p)).c_str() : "greedy",
                tok.decode(generated.data(), int(generated.size())).c_str());
    return 0;
  };
  return c;
}

}  // namespace meridian::cli

// `meridian generate`: continue a prompt with a model of a task that generates (TaskSpec::generate;
// task lm: a checkpoint or a published Llama), greedily or by top-p sampling, to see what the model
// learnt or knows. Runs on rank 0 (other ranks return at once).
#include <cstdio>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/nn/autocast.h"
#include "meridian/tasks/registry.h"

namespace meridian::cli {

Command generate_command() {
  Command c;
  c.name = "generate";
  c.summary = "Continue a prompt with a language model, checkpoint or published (greedy or top-p sampling)";
  c.add_options = [](cxxopts::Options& o) {
    add_model_option(o, "The language model");
    // clang-format off
    o.add_options()
        ("prompt", "The instruction, or the text itself (--chat-template none)", cxxopts::value<std::string>()->default_value(""))
        ("input", "Optional input for the instruction", cxxopts::value<std::string>()->default_value(""))
        ("chat-template", "alpaca (the template prep text trains with), llama-2 or mistral ([INST] ... [/INST]), none; default: alpaca for a checkpoint, none for a published model", cxxopts::value<std::string>()->default_value(""))
        ("raw", "The same as --chat-template none")
        ("tokenizer", "A Hugging Face directory, a dataset .h5 or a SentencePiece .model; default: the published directory's, else the checkpoint's training data", cxxopts::value<std::string>()->default_value(""))
        ("max-new-tokens", "Tokens to generate at most (stops at eos)", cxxopts::value<int>()->default_value("64"))
        ("top-p", "Nucleus sampling mass; 0: greedy", cxxopts::value<double>()->default_value("0"))
        ("temperature", "Softmax temperature for sampling", cxxopts::value<double>()->default_value("1.0"))
        ("seed", "Sampling seed", cxxopts::value<uint64_t>()->default_value("0"));
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    tasks::GenerateOptions o;
    o.prompt = p["prompt"].as<std::string>();
    o.input = p["input"].as<std::string>();
    o.chat_template = p["chat-template"].as<std::string>();
    if (p.count("raw")) {
      if (!o.chat_template.empty() && o.chat_template != "none")
        throw UserError("generate: --raw is --chat-template none; give one of them");
      o.chat_template = "none";
    }
    o.tokenizer = p["tokenizer"].as<std::string>();
    o.max_new_tokens = p["max-new-tokens"].as<int>();
    o.top_p = p["top-p"].as<double>();
    o.temperature = p["temperature"].as<double>();
    o.seed = p["seed"].as<uint64_t>();
    if (o.prompt.empty()) throw UserError("generate: --prompt is required");
    if (o.max_new_tokens < 1) throw UserError("generate: --max-new-tokens must be at least 1");
    if (o.top_p < 0 || o.top_p > 1) throw UserError("generate: --top-p must be within [0, 1]");
    if (!(o.temperature > 0)) throw UserError("generate: --temperature must be > 0");
    if (rt.rank() != 0) return 0;
    const auto model = open_model_option(p, rt, "generate");
    const nn::AutocastScope precision(rt.device().type(), model.autocast_dtype(rt.device()));
    const auto generate = tasks::need(*model.spec, &tasks::TaskSpec::generate, "generate", model.path);
    const auto r = generate(model, o, rt.device());
    std::printf("prompt (%lld tokens): %s\n", (long long)r.prompt_tokens, r.prompt.c_str());
    std::printf("generated (%lld tokens, %s): %s\n", (long long)r.tokens,
                o.top_p > 0 ? ("top-p " + std::to_string(o.top_p)).c_str() : "greedy", r.text.c_str());
    return 0;
  };
  return c;
}

}  // namespace meridian::cli

// `meridian generate`: continue a prompt with a language-model checkpoint (task lm), greedily or by
// top-p sampling, to see what the model learnt. Runs on rank 0 (other ranks return at once).
#include <cstdio>

#include "commands.h"
#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/format.h"
#include "meridian/data/prep.h"
#include "meridian/data/tokenizer.h"
#include "meridian/models/llama.h"

namespace meridian::cli {

namespace {

// The next token from the last position's logits: the most likely one (top_p == 0), else a draw
// from the smallest set of tokens whose probabilities reach top_p.
int64_t next_token(const at::Tensor& logits, double top_p, double temperature, at::Generator& gen) {
  if (top_p <= 0) return logits.argmax().item<int64_t>();
  const auto probs = at::softmax(logits.to(at::kDouble) / temperature, -1);
  const auto [sorted, order] = probs.sort(/*dim=*/-1, /*descending=*/true);
  const auto before = sorted.cumsum(-1) - sorted;  // probability mass ahead of each token
  const auto kept = sorted.masked_fill(before >= top_p, 0.0);
  const auto pick = at::multinomial(kept / kept.sum(), 1, /*replacement=*/false, gen);
  return order[pick.item<int64_t>()].item<int64_t>();
}

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

    Config config;
    int64_t vocab = 0;
    {
      ckpt::Reader reader(path);
      config = ckpt::saved_config(reader);
      if (config.get<std::string>("task.name", "siglip") != "lm")
        throw UserError(path + ": generate needs a checkpoint of an lm run (task.name is " +
                        config.get<std::string>("task.name", "siglip") + ")");
      vocab = reader.shape("model/model.embed_tokens.weight").at(0);  // raised to the tokenizer's in training
    }
    std::string tokenizer_path = p["tokenizer"].as<std::string>();
    if (tokenizer_path.empty()) tokenizer_path = config.get<std::string>("data.train", "");
    if (tokenizer_path.empty()) throw UserError("generate: give --tokenizer (the checkpoint's config names no data.train)");
    const data::Tokenizer tok = load_tokenizer(tokenizer_path);

    auto mc = models::LlamaConfig::from_config(config);
    mc.vocab_size = vocab;
    models::Llama model(mc);
    ckpt::load_module(path, *model);
    model->to(rt.device());
    model->eval();
    at::NoGradGuard no_grad;

    const std::string text = p.count("raw") ? prompt : data::alpaca_prompt(prompt, p["input"].as<std::string>());
    std::vector<int64_t> ids;
    if (tok.bos_id() >= 0) ids.push_back(tok.bos_id());
    for (int32_t id : tok.ids(text)) ids.push_back(id);
    const size_t prompt_tokens = ids.size();
    at::Generator gen = at::detail::createCPUGenerator(p["seed"].as<uint64_t>());
    std::vector<int32_t> generated;
    // Incremental decoding: the prompt once, then one token per step against the cached keys and
    // values; past max_seq_len, the last max_seq_len tokens again from scratch each step.
    models::KvCache cache;
    for (int i = 0; i < max_new; ++i) {
      std::vector<int64_t> input;
      if (int64_t(ids.size()) <= mc.max_seq_len) {
        input.assign(ids.begin() + cache.length, ids.end());
      } else {
        cache.clear();
        input.assign(ids.end() - mc.max_seq_len, ids.end());
      }
      models::KvCache* use = int64_t(ids.size()) <= mc.max_seq_len ? &cache : nullptr;
      const auto window = at::tensor(input, at::kLong).unsqueeze(0);
      const auto logits = model->forward(window.to(rt.device()), use)[0][-1].to(at::kCPU);
      const int64_t next = next_token(logits, top_p, temperature, gen);
      if (next == tok.eos_id()) break;
      ids.push_back(next);
      generated.push_back(int32_t(next));
    }
    std::printf("prompt (%zu tokens): %s\n", prompt_tokens, text.c_str());
    std::printf("generated (%zu tokens, %s): %s\n", generated.size(),
                top_p > 0 ? ("top-p " + std::to_string(top_p)).c_str() : "greedy",
                tok.decode(generated.data(), int(generated.size())).c_str());
    return 0;
  };
  return c;
}

}  // namespace meridian::cli

#include "meridian/models/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <stdexcept>

namespace meridian::models {

int64_t next_token(const at::Tensor& logits, double top_p, double temperature, at::Generator& gen) {
  if (top_p <= 0) return logits.argmax().item<int64_t>();
  const auto probs = at::softmax(logits.to(at::kDouble) / temperature, -1);
  const auto [sorted, order] = probs.sort(/*dim=*/-1, /*descending=*/true);
  const auto before = sorted.cumsum(-1) - sorted;  // probability mass ahead of each token
  const auto kept = sorted.masked_fill(before >= top_p, 0.0);
  const auto pick = at::multinomial(kept / kept.sum(), 1, /*replacement=*/false, gen);
  return order[pick.item<int64_t>()].item<int64_t>();
}

std::vector<int64_t> generate(Llama& model, const std::vector<int64_t>& prompt, const SamplingOptions& options) {
  if (prompt.empty()) throw std::invalid_argument("generate: empty prompt");
  torch::NoGradGuard no_grad;
  const int64_t window = model->config().max_seq_len;
  const auto device = model->parameters().front().device();
  at::Generator gen = at::detail::createCPUGenerator(options.seed);
  std::vector<int64_t> ids = prompt, generated;
  KvCache cache;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const bool cached = int64_t(ids.size()) <= window;
    if (!cached) cache.clear();
    const std::vector<int64_t> input(cached ? ids.begin() + cache.length : ids.end() - window, ids.end());
    const auto tokens = at::tensor(input, at::kLong).unsqueeze(0).to(device);
    const auto logits = model->forward(tokens, cached ? &cache : nullptr)[0][-1].to(at::kCPU);
    const int64_t next = next_token(logits, options.top_p, options.temperature, gen);
    if (next == options.eos_id) break;
    ids.push_back(next);
    generated.push_back(next);
  }
  return generated;
}

}  // namespace meridian::models

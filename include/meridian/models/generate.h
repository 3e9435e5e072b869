// Text generation with a Llama-style decoder: greedy or nucleus (top-p) sampling, incremental
// decoding against a KvCache. Not collective; runs on the model's device, one sequence at a time.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "meridian/models/llama.h"

namespace meridian::models {

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  double top_p = 0;        // nucleus mass within (0, 1]; 0: greedy
  double temperature = 1;  // > 0; sampling only
  uint64_t seed = 0;       // sampling only
  int64_t eos_id = -1;     // generation stops before this token; -1: none
};

// The next token from one position's logits [vocab]: the most likely one (top_p == 0), else a draw
// (from `gen`) from the smallest set of tokens whose probabilities reach top_p.
int64_t next_token(const at::Tensor& logits, double top_p, double temperature, at::Generator& gen);

// Continues `prompt` (token ids, not empty) with at most max_new_tokens tokens, stopping before eos;
// returns the new tokens. The prompt runs once, then one token per step against cached keys and
// values; once the sequence is longer than model.max_seq_len, each step runs the last max_seq_len
// tokens from scratch. std::invalid_argument for an empty prompt.
std::vector<int64_t> generate(Llama& model, const std::vector<int64_t>& prompt, const SamplingOptions& options);

}  // namespace meridian::models

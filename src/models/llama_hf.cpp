#include "meridian/models/llama_hf.h"

#include <fmt/format.h>

#include "meridian/core/error.h"

namespace meridian::models {

std::vector<HfConfigKey> llama_config_keys(const nlohmann::json& config, const std::string& origin) {
  const auto text = [&](const char* field, const std::string& fallback) {
    const auto it = config.find(field);
    if (it == config.end() || it->is_null()) return fallback;
    if (!it->is_string()) throw DataError(origin, field, "is not a string (" + it->dump() + ")");
    return it->get<std::string>();
  };
  const std::string type = text("model_type", "");
  if (type != "llama")
    throw DataError(origin, "model_type", "is '" + type + "', not 'llama' (a Hugging Face LlamaForCausalLM)");
  const auto number = [&](const char* field, double fallback) {
    const auto it = config.find(field);
    if (it == config.end() || it->is_null()) return fallback;
    if (!it->is_number()) throw DataError(origin, field, "is not a number (" + it->dump() + ")");
    return it->get<double>();
  };
  const auto flag = [&](const char* field) {
    const auto it = config.find(field);
    if (it == config.end() || it->is_null()) return false;
    if (!it->is_boolean()) throw DataError(origin, field, "is not true or false (" + it->dump() + ")");
    return it->get<bool>();
  };
  const std::string act = text("hidden_act", "silu");
  if (act != "silu") throw DataError(origin, "hidden_act", "is '" + act + "'; meridian's Llama has silu (SwiGLU)");
  const auto scaling = config.find("rope_scaling");  // null, or {"rope_type": "default"}: plain RoPE
  if (scaling != config.end() && !scaling->is_null() &&
      !(scaling->is_object() && scaling->size() == 1 && scaling->value("rope_type", std::string()) == "default"))
    throw DataError(origin, "rope_scaling",
                    "is " + config["rope_scaling"].dump() + "; meridian's Llama has plain RoPE (rope_scaling null)");
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (flag(bias)) throw DataError(origin, bias, "is true; meridian's Llama has no biases");

  const double dim = number("hidden_size", 4096), heads = number("num_attention_heads", 32);
  if (config.contains("head_dim") && !config["head_dim"].is_null() && number("head_dim", 0) * heads != dim)
    throw DataError(
        origin, "head_dim",
        fmt::format("is {}, not hidden_size / num_attention_heads = {}", number("head_dim", 0), dim / heads));
  std::vector<HfConfigKey> keys;
  const auto add = [&](const std::string& key, double value, const std::string& field) {
    keys.push_back({key, std::to_string(int64_t(value)), field});
  };
  add("model.vocab_size", number("vocab_size", 32000), "vocab_size");
  add("model.dim", dim, "hidden_size");
  add("model.layers", number("num_hidden_layers", 32), "num_hidden_layers");
  add("model.heads", heads, "num_attention_heads");
  add("model.kv_heads", number("num_key_value_heads", heads), "num_key_value_heads");
  add("model.hidden", number("intermediate_size", 11008), "intermediate_size");
  add("model.max_seq_len", number("max_position_embeddings", 2048), "max_position_embeddings");
  // transformers 5 writes rope_parameters {"rope_type", "rope_theta"} in place of rope_theta and rope_scaling.
  double theta = number("rope_theta", 10000);
  std::string theta_field = "rope_theta";
  if (const auto rope = config.find("rope_parameters"); rope != config.end() && !rope->is_null()) {
    if (!rope->is_object()) throw DataError(origin, "rope_parameters", "is not an object (" + rope->dump() + ")");
    const auto type = rope->find("rope_type");
    if (type != rope->end() && !(type->is_string() && type->get<std::string>() == "default"))
      throw DataError(origin, "rope_parameters",
                      "is " + rope->dump() + "; meridian's Llama has plain RoPE (rope_type \"default\")");
    if (const auto t = rope->find("rope_theta"); t != rope->end() && !t->is_null()) {
      if (!t->is_number()) throw DataError(origin, "rope_parameters.rope_theta", "is not a number (" + t->dump() + ")");
      theta = t->get<double>(), theta_field = "rope_parameters.rope_theta";
    }
  }
  keys.push_back({"model.rope_theta", fmt::format("{}", theta), theta_field});
  keys.push_back({"model.norm_eps", fmt::format("{}", number("rms_norm_eps", 1e-6)), "rms_norm_eps"});
  keys.push_back({"model.tie_embeddings", flag("tie_word_embeddings") ? "true" : "false", "tie_word_embeddings"});
  return keys;
}

nlohmann::json llama_hf_config(const LlamaConfig& c, const std::string& torch_dtype, int bos_id, int eos_id) {
  nlohmann::json j{{"architectures", {"LlamaForCausalLM"}},
                   {"model_type", "llama"},
                   {"torch_dtype", torch_dtype},
                   {"vocab_size", c.vocab_size},
                   {"hidden_size", c.dim},
                   {"intermediate_size", c.hidden},
                   {"num_hidden_layers", c.layers},
                   {"num_attention_heads", c.heads},
                   {"num_key_value_heads", c.kv_heads},
                   {"head_dim", c.head_dim()},
                   {"hidden_act", "silu"},
                   {"max_position_embeddings", c.max_seq_len},
                   {"rms_norm_eps", c.norm_eps},
                   {"rope_theta", c.rope_theta},
                   {"rope_scaling", nullptr},
                   {"attention_bias", false},
                   {"attention_dropout", 0.0},
                   {"mlp_bias", false},
                   {"tie_word_embeddings", c.tie_embeddings},
                   {"initializer_range", 0.02},
                   {"pretraining_tp", 1},
                   {"use_cache", true}};
  if (bos_id >= 0) j["bos_token_id"] = bos_id;
  if (eos_id >= 0) j["eos_token_id"] = eos_id;
  return j;
}

bool llama_skipped_tensor(const std::string& name) {
  const std::string suffix = "rotary_emb.inv_freq";
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace meridian::models

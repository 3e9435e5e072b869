// `meridian embed`: image or text embeddings of a SigLIP model (a Hugging Face directory or a
// checkpoint) into an HDF5 file, for retrieval indexes and for checking against other
// implementations (tasks::embed_images / embed_texts).
#include <spdlog/spdlog.h>

#include "commands.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/nn/autocast.h"
#include "meridian/tasks/siglip_hf.h"

namespace meridian::cli {

Command embed_command() {
  Command c;
  c.name = "embed";
  c.summary = "Embed images or texts with a SigLIP model (Hugging Face directory or checkpoint) into an .h5 file";
  c.add_options = [](cxxopts::Options& o) {
    add_model_option(o, "The SigLIP model");
    // clang-format off
    o.add_options()
        ("images", "Directory of images (searched recursively; sorted names)", cxxopts::value<std::string>())
        ("texts", "UTF-8 text file, one text per line (empty lines skipped)", cxxopts::value<std::string>())
        ("tokenizer", "For texts: a Hugging Face directory with spiece.model or a dataset; default: the model's", cxxopts::value<std::string>()->default_value(""))
        ("batch", "Inputs per forward on each rank", cxxopts::value<int64_t>()->default_value("32"))
        ("out", "HDF5 file to write: /embeddings, /names (and /tokens for texts)", cxxopts::value<std::string>());
    // clang-format on
  };
  c.run = [](const cxxopts::ParseResult& p, comm::Runtime& rt) {
    if (!p.count("out") || p.count("images") + p.count("texts") != 1)
      throw UserError("embed: give --model, --out and one of --images DIR or --texts FILE");
    const int64_t batch = p["batch"].as<int64_t>();
    if (batch < 1) throw UserError("embed: --batch must be at least 1");
    const auto source = open_model_option(p, rt, "embed");
    const nn::AutocastScope precision(rt.device().type(), source.autocast_dtype(rt.device()));
    auto model = tasks::load_siglip(source, p["tokenizer"].as<std::string>());
    const auto out = p["out"].as<std::string>();
    const int64_t n = p.count("images") ? tasks::embed_images(rt, model, p["images"].as<std::string>(), out, batch)
                                        : tasks::embed_texts(rt, model, p["texts"].as<std::string>(), out, batch);
    if (rt.rank() == 0)
      spdlog::info("embed: {} {} of dimension {} on {} rank(s) -> {}", n, p.count("images") ? "images" : "texts",
                   model.model->config().embed, rt.size(), out);
    return 0;
  };
  return c;
}

}  // namespace meridian::cli

// The write driver of text files (see prep_job.h).
#include <chrono>
#include <filesystem>

#include "collective_writer.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/data/tokenizer.h"
#include "prep_job.h"

namespace fs = std::filesystem;

namespace meridian::data {

namespace {

// One round's documents of this rank, ready to write.
struct RoundDocs {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> starts;  // per document: its first token, counted in this round's tokens
};

// Collective: tokenizes this rank's records [first, last); any failure throws UserError on every
// rank (agreed before anyone throws).
RoundDocs tokenize_round(const comm::Runtime& rt, const TextJob& job, const Tokenizer& tok, int64_t first,
                         int64_t last) {
  RoundDocs d;
  std::string failure;
  try {
    for (int64_t i = first; i < last; ++i) {
      const TextRecord r = job.record(i);
      d.starts.push_back(int64_t(d.tokens.size()));
      for (const TextExchange& e : r.exchanges) {
        const bool bos =
            e.bos == TextExchange::Bos::kAlways || (e.bos == TextExchange::Bos::kTokenizer && tok.adds_bos());
        if (bos && tok.bos_id() >= 0) d.tokens.push_back(tok.bos_id()), d.mask.push_back(0);
        // The joined text at once; the prompt's own length says where the loss starts. A chat
        // template's exchange follows its bos or the eos before it (the "▁" before it: Tokenizer::ids).
        const bool after_special = e.bos != TextExchange::Bos::kTokenizer;
        const size_t prompt = e.prompt.empty() ? 0 : tok.ids(e.prompt, after_special).size();
        const auto ids = tok.ids(e.prompt + e.response, after_special);
        for (size_t k = 0; k < ids.size(); ++k) d.tokens.push_back(ids[k]), d.mask.push_back(k >= prompt);
        if (tok.eos_id() >= 0) d.tokens.push_back(tok.eos_id()), d.mask.push_back(1);
      }
    }
  } catch (const std::exception& e) {
    failure = std::string("prep text: ") + e.what();
  }
  failure = agree_error(rt, failure);  // every rank throws together, or none
  if (!failure.empty()) throw UserError(failure);
  return d;
}

}  // namespace

PrepReport run_text_job(const comm::Runtime& rt, const PrepCommon& o, const TextJob& job, const Tokenizer* given) {
  const auto start = std::chrono::steady_clock::now();
  check_output(rt, o);
  check_same_inputs(rt, job.count, {});
  if (job.count == 0) throw UserError("prep: no input records in " + job.inputs);
  const Tokenizer tok = given ? *given : shared_tokenizer(rt, o, job.tokenizer_corpus, /*keep_whitespace=*/true);
  const std::string tmp = o.out + ".tmp";
  int64_t base = 0, tok_total = 0;
  leaving_nothing_on_failure(rt, tmp, [&] {
    CollectiveWriter writer(rt, tmp);
    writer.create("/tokens", H5T_STD_I32LE, {}, std::max<int64_t>(job.count * 64, 65536), 65536);
    writer.create("/loss_mask", H5T_STD_U8LE, {}, std::max<int64_t>(job.count * 64, 65536), 65536);
    writer.create("/doc_offsets", H5T_STD_I64LE, {}, job.count + 1, 4096);
    RaggedColumns docs(rt, writer, {"/tokens", "/loss_mask"}, "/doc_offsets");
    const BlockRounds rounds{job.count, o.block, rt.rank(), rt.size()};
    for (int64_t round = 0; round < rounds.rounds(); ++round) {
      const RoundDocs d = tokenize_round(rt, job, tok, rounds.first(round), rounds.last(round));
      const int64_t mine = int64_t(d.starts.size());
      const int64_t offset = base + rt.exclusive_prefix_sum(mine);
      docs.place(int64_t(d.tokens.size()));
      docs.write("/tokens", H5T_NATIVE_INT32, d.tokens.data());
      docs.write("/loss_mask", H5T_NATIVE_UINT8, d.mask.data());
      docs.write_offsets(offset, d.starts);
      base += rt.sum(mine);
    }
    tok_total = docs.total();
    writer.close({{"/tokens", tok_total}, {"/loss_mask", tok_total}, {"/doc_offsets", base + 1}});
    if (rt.rank() == 0) {
      Finisher finisher(tmp);
      finisher.write_int64("/doc_offsets", base, tok_total);
      finisher.write_tokenizer(tok);
      finisher.finish("text", job.split, base);
      fs::rename(tmp, o.out);
    }
    rt.barrier();
  });
  PrepReport report;
  report.inputs = job.count;
  report.written = base;
  report.tokens = tok_total;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace meridian::data

// prep's --holdout: a validation split taken from the records themselves (prep.h, prep_job.h).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#include "collective_writer.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"
#include "meridian/data/tokenizer.h"
#include "prep_job.h"

namespace fs = std::filesystem;

namespace meridian::data {

namespace {

// --holdout's value: a number of records (n) or a fraction of them (f); exactly one is set.
struct HoldoutValue {
  int64_t n = 0;
  double f = 0;
};

HoldoutValue parse_holdout(const std::string& value) {
  const UserError bad("--holdout: '" + value +
                      "' is neither a number of records (an integer >= 1) nor a fraction between 0 and 1 "
                      "(e.g. 0.02)");
  if (value.empty()) throw bad;
  if (std::all_of(value.begin(), value.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (value.size() > 18) throw bad;
    const int64_t n = std::stoll(value);
    if (n < 1) throw bad;
    return {n, 0};
  }
  size_t pos = 0;
  double f = 0;
  try {
    f = std::stod(value, &pos);
  } catch (const std::exception&) {
    throw bad;
  }
  if (pos != value.size() || !(f > 0 && f < 1)) throw bad;
  return {0, f};
}

}  // namespace

void check_holdout_value(const std::string& value) { parse_holdout(value); }

int64_t holdout_count(const std::string& value, int64_t records, const std::string& inputs) {
  const HoldoutValue v = parse_holdout(value);
  const std::string of = " records of " + inputs;
  if (v.n > records) throw UserError("--holdout " + value + ": larger than the " + std::to_string(records) + of);
  const int64_t n = v.n ? v.n : std::max<int64_t>(1, std::llround(v.f * double(records)));
  if (n >= records)
    throw UserError("--holdout " + value + ": holds out " + std::to_string(n) + " of the " + std::to_string(records) +
                    of + ", leaving none for --out");
  return n;
}

std::vector<int64_t> holdout_indices(int64_t records, int64_t n, uint64_t seed) {
  const uint64_t s = splitmix64(seed);
  std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(records));  // (key, index): ties go to the index
  for (int64_t i = 0; i < records; ++i) keyed[size_t(i)] = {splitmix64(s ^ uint64_t(i)), i};
  std::nth_element(keyed.begin(), keyed.begin() + n, keyed.end());
  std::vector<int64_t> held;
  held.reserve(size_t(n));
  for (int64_t k = 0; k < n; ++k) held.push_back(keyed[size_t(k)].second);
  std::sort(held.begin(), held.end());
  return held;
}

HoldoutPlan::HoldoutPlan(const PrepCommon& o, int64_t records, const std::string& inputs) {
  if (records == 0) throw UserError("prep: no input records in " + inputs);
  inputs_[1] = holdout_indices(records, holdout_count(o.holdout, records, inputs), o.holdout_seed);
  held_.assign(size_t(records), false);
  for (int64_t i : inputs_[1]) held_[size_t(i)] = true;
  row_.resize(size_t(records));
  int64_t next[2] = {0, 0};
  for (int64_t i = 0; i < records; ++i) {
    const bool h = held_[size_t(i)];
    row_[size_t(i)] = next[h]++;
    if (!h) inputs_[0].push_back(i);
  }
}

bool HoldoutPlan::owns(int64_t input, int block, int rank, int size) const {
  return input < records() && BlockRounds{0, block, rank, size}.owns(row_[size_t(input)]);
}

PrepReport write_with_holdout(const comm::Runtime& rt, const PrepCommon& o,
                              const std::function<std::unique_ptr<Tokenizer>()>& tokenizer,
                              const std::function<PrepReport(const PrepCommon&, bool, const Tokenizer*)>& write) {
  PrepCommon files[2] = {o, o};
  files[1].out = o.holdout_out;
  for (const auto& f : files) check_output(rt, f);  // both refused before any work, as --out alone is
  const std::unique_ptr<Tokenizer> tok = tokenizer();
  for (auto& f : files) f.out += ".tmp", f.overwrite = true, f.holdout.clear(), f.holdout_out.clear();
  PrepReport reports[2];
  bool renamed = false;  // o.out is in place (rank 0)
  try {
    for (int held = 0; held < 2; ++held) reports[held] = write(files[held], held == 1, tok.get());
    std::string error;
    if (rt.rank() == 0) {
      try {
        fs::rename(files[0].out, o.out);
        renamed = true;
        fs::rename(files[1].out, o.holdout_out);
      } catch (const std::exception& e) {
        error = std::string("prep: ") + e.what();
      }
    }
    error = agree_error(rt, error);
    if (!error.empty()) throw UserError(error);
  } catch (...) {
    if (rt.rank() == 0) {  // neither file is left looking complete
      std::error_code ec;
      for (const auto& f : files) fs::remove(f.out, ec);
      if (renamed) fs::remove(o.out, ec);
    }
    throw;
  }
  reports[0].holdout = std::make_shared<PrepReport>(reports[1]);
  return reports[0];
}

}  // namespace meridian::data

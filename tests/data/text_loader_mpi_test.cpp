// The text (language-model) loader on 1, 2 and 4 ranks, against expectations computed directly from
// the file's /tokens, /loss_mask and /doc_offsets (read here with HDF5, not through the loader).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "data_test.h"
#include "meridian/core/error.h"
#include "meridian/data/format.h"
#include "meridian/data/prep.h"
#include "meridian/data/synthetic_prep.h"
#include "meridian/data/text_loader.h"
#include "mpi_test_main.h"

namespace fs = std::filesystem;
using meridian::test::runtime;
namespace data = meridian::data;

namespace {

// Its own subdirectory of the data tests' shared one (file names must not clash with theirs).
const std::string& text_dir() {
  static const std::string dir = [] {
    const std::string d = meridian::test::shared_dir() + "/text_loader";
    if (runtime().rank() == 0) fs::create_directories(d);
    runtime().barrier();
    return d;
  }();
  return dir;
}

// Synthetic instruction data: prompt tokens (mask 0) then response + eos (mask 1), 41 documents.
const std::string& text_file() {
  static std::string path = [] {
    data::PrepSyntheticOptions o;
    o.out = text_dir() + "/text.h5";
    o.count = 41;
    o.seed = 7;
    o.vocab_size = 1000;
    o.block = 3;
    EXPECT_EQ(data::prep_synthetic_text(runtime(), o).written, 41);
    return o.out;
  }();
  return path;
}

// Plain text with loss mask 1 on every token, bos included: only the document rule cuts targets there.
const std::string& plain_file() {
  static std::string path = [] {
    const std::string dir = text_dir();
    if (runtime().rank() == 0) {
      std::ofstream out(dir + "/plain.jsonl");
      for (int i = 0; i < 30; ++i)
        out << R"({"text": "Document )" << i << " tells of the river " << (i % 7) << " and the forest " << (i * 3) % 11
            << (i % 2 ? R"( near the harbor."})" : R"(."})") << "\n";
    }
    runtime().barrier();
    data::PrepTextOptions o;
    o.jsonl = dir + "/plain.jsonl";
    o.out = dir + "/plain.h5";
    o.vocab_size = 300;
    o.block = 2;
    EXPECT_EQ(data::prep_text(runtime(), o).written, 30);
    // prep gives bos mask 0, which already hides each document start; with loss on every token
    // (still a valid file) only the loader's document rule can cut the targets there.
    if (runtime().rank() == 0) {
      const hid_t file = H5Fopen(o.out.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      const hid_t mask = H5Dopen2(file, "/loss_mask", H5P_DEFAULT);
      const hid_t space = H5Dget_space(mask);
      std::vector<uint8_t> ones(size_t(H5Sget_simple_extent_npoints(space)), 1);
      EXPECT_GE(H5Dwrite(mask, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, ones.data()), 0);
      H5Sclose(space);
      H5Dclose(mask);
      H5Fclose(file);
    }
    runtime().barrier();
    return o.out;
  }();
  return path;
}

// The whole (small) file, read directly. Called before any loader exists in a test (HDF5 is not
// thread-safe and the loader's thread uses it under a lock private to the data library).
struct Reference {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> offsets;
  int64_t pad_id = 0;

  int64_t doc_of(int64_t p) const {  // the (non-empty) document holding token p
    return int64_t(std::upper_bound(offsets.begin(), offsets.end(), p) - offsets.begin()) - 1;
  }
  int64_t doc_length(int64_t d) const { return offsets[size_t(d) + 1] - offsets[size_t(d)]; }

  // tokens and targets of one sample, from the definition in text_loader.h.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> expected(data::TextLoaderOptions::Mode mode, int64_t L,
                                                                 int64_t row) const {
    std::vector<int64_t> tok(static_cast<size_t>(L)), tgt(static_cast<size_t>(L));
    for (int64_t t = 0; t < L; ++t) {
      if (mode == data::TextLoaderOptions::Pack) {
        const int64_t p = row * L + t;
        tok[size_t(t)] = tokens[size_t(p)];
        const bool same_doc = doc_of(p) == doc_of(p + 1);
        tgt[size_t(t)] = same_doc && mask[size_t(p + 1)] == 1 ? tokens[size_t(p + 1)] : -100;
      } else {
        const int64_t s = offsets[size_t(row)], n = doc_length(row);
        tok[size_t(t)] = t < n ? tokens[size_t(s + t)] : pad_id;
        tgt[size_t(t)] = t + 1 < n && mask[size_t(s + t + 1)] == 1 ? tokens[size_t(s + t + 1)] : -100;
      }
    }
    return {tok, tgt};
  }
};

const Reference& reference(const std::string& path = text_file()) {
  static std::map<std::string, Reference> cache;
  auto it = cache.find(path);
  if (it != cache.end()) return it->second;
  const Reference& ref = cache[path] = [&] {
    Reference r;
    r.pad_id = data::validate_dataset(path).pad_id;
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const auto read = [&](const char* name, hid_t type, auto& out) {
      const hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
      const hid_t s = H5Dget_space(d);
      out.resize(size_t(H5Sget_simple_extent_npoints(s)));
      EXPECT_GE(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), 0) << name;
      H5Sclose(s);
      H5Dclose(d);
    };
    read("/tokens", H5T_NATIVE_INT32, r.tokens);
    read("/loss_mask", H5T_NATIVE_UINT8, r.mask);
    read("/doc_offsets", H5T_NATIVE_INT64, r.offsets);
    H5Fclose(file);
    return r;
  }();
  return ref;
}

std::vector<int64_t> to_vector(const at::Tensor& t) {
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()};
}

// Every rank's rows, in rank order.
std::vector<int64_t> gather_rows(const std::vector<int64_t>& mine) {
  std::ostringstream s;
  for (int64_t r : mine) s << r << ' ';
  std::vector<int64_t> all;
  for (const auto& text : runtime().allgather(s.str())) {
    std::istringstream in(text);
    for (int64_t r; in >> r;) all.push_back(r);
  }
  return all;
}

// Reads one epoch, checks each sample against the reference, returns the rows every rank saw.
std::vector<int64_t> check_one_epoch(data::TextLoader& loader, const data::TextLoaderOptions& o) {
  const auto& ref = reference(o.path);
  std::vector<int64_t> mine;
  const auto& s = loader.sampler();
  for (int64_t step = 0; step < s.steps_per_epoch(); ++step) {
    const auto b = loader.next();
    EXPECT_EQ(b.epoch, 0);
    EXPECT_EQ(b.step, step);
    EXPECT_EQ(b.next_position, (step + 1) * s.global_batch());
    EXPECT_EQ(b.tokens.sizes(), (at::IntArrayRef{o.batch_size, o.seq_len}));
    EXPECT_EQ(b.targets.sizes(), (at::IntArrayRef{o.batch_size, o.seq_len}));
    EXPECT_EQ(b.tokens.scalar_type(), at::kLong);
    EXPECT_EQ(b.targets.scalar_type(), at::kLong);
    for (int64_t i = 0; i < o.batch_size; ++i) {
      const int64_t row = b.rows[i].item<int64_t>();
      EXPECT_EQ(row, s.row(0, step * s.global_batch() + runtime().rank() + i * runtime().size()));
      mine.push_back(row);
      const auto [tok, tgt] = ref.expected(o.mode, o.seq_len, row);
      EXPECT_EQ(to_vector(b.tokens[i]), tok) << "row " << row;
      EXPECT_EQ(to_vector(b.targets[i]), tgt) << "row " << row;
    }
  }
  const auto next = loader.next();  // epochs follow each other
  EXPECT_EQ(next.epoch, 1);
  EXPECT_EQ(next.step, 0);
  return gather_rows(mine);
}

using meridian::test::message_of;

}  // namespace

TEST(TextLoader, PackCoversEveryWindowOncePerEpochWithTargetsCutAtPromptsAndDocuments) {
  for (const std::string& path : {text_file(), plain_file()}) {
    SCOPED_TRACE(path);
    const auto& ref = reference(path);
    data::TextLoaderOptions o;
    o.path = path;
    o.seq_len = 16;
    o.batch_size = 2;
    o.seed = 3;
    o.mode = data::TextLoaderOptions::Pack;
    o.drop_last = false;  // the last global batch wraps around: every window is visited
    const int64_t W = (int64_t(ref.tokens.size()) - 1) / o.seq_len;
    // The fixture exercises every case: prompt tokens, document starts inside windows, response tokens.
    int64_t cut_by_document = 0, ignored = 0, trained = 0;
    for (int64_t w = 0; w < W; ++w)
      for (int64_t t : ref.expected(o.mode, o.seq_len, w).second) (t == -100 ? ignored : trained) += 1;
    for (size_t d = 1; d + 1 < ref.offsets.size(); ++d) cut_by_document += ref.offsets[d] <= W * o.seq_len;
    ASSERT_GT(cut_by_document, 3);
    if (path == plain_file()) {  // document starts carry loss: only the document rule hides them
      int64_t trained_starts = 0;
      for (size_t d = 1; d + 1 < ref.offsets.size(); ++d) trained_starts += ref.mask[size_t(ref.offsets[d])] == 1;
      ASSERT_GT(trained_starts, 3);
    }
    ASSERT_GT(ignored, 0);
    ASSERT_GT(trained, 0);

    data::TextLoader loader(runtime(), o);
    EXPECT_EQ(loader.samples(), W);
    const auto all = check_one_epoch(loader, o);
    const auto& s = loader.sampler();
    ASSERT_EQ(int64_t(all.size()), s.epoch_samples());
    std::map<int64_t, int> seen;
    for (int64_t r : all) seen[r] += 1;
    EXPECT_EQ(int64_t(seen.size()), W) << "every window once";
    EXPECT_EQ(seen.begin()->first, 0);
    EXPECT_EQ(seen.rbegin()->first, W - 1);
    int64_t repeats = 0;
    for (const auto& [row, n] : seen) repeats += n - 1;
    EXPECT_EQ(repeats, s.epoch_samples() - W) << "only the wrapped-around tail repeats";
  }
}

TEST(TextLoader, PadGivesOneDocumentPerSampleTruncatedOrPadded) {
  const auto& ref = reference();
  std::vector<int64_t> lengths;
  for (size_t d = 0; d + 1 < ref.offsets.size(); ++d) lengths.push_back(ref.doc_length(int64_t(d)));
  std::sort(lengths.begin(), lengths.end());
  data::TextLoaderOptions o;
  o.path = text_file();
  o.seq_len = lengths[lengths.size() / 2];  // half the documents are truncated, the others padded
  ASSERT_LT(lengths.front(), o.seq_len + 1);
  ASSERT_GT(lengths.back(), o.seq_len + 1);
  o.batch_size = 3;
  o.seed = 9;
  o.mode = data::TextLoaderOptions::Pad;
  data::TextLoader loader(runtime(), o);
  EXPECT_EQ(loader.samples(), 41);
  const auto all = check_one_epoch(loader, o);
  const auto& s = loader.sampler();
  ASSERT_EQ(int64_t(all.size()), s.epoch_samples());
  std::vector<int64_t> sorted = all, want;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "no document twice (drop_last)";
  for (int64_t p = 0; p < s.epoch_samples(); ++p) want.push_back(s.row(0, p));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(sorted, want);
  if (s.epoch_samples() == 41) EXPECT_EQ(sorted.back(), 40);
}

TEST(TextLoader, ResumingAtEpochAndPositionContinuesExactly) {
  reference();
  for (auto mode : {data::TextLoaderOptions::Pack, data::TextLoaderOptions::Pad}) {
    data::TextLoaderOptions o;
    o.path = text_file();
    o.seq_len = 12;
    o.batch_size = 2;
    o.seed = 21;
    o.mode = mode;
    o.prefetch = 3;
    std::vector<data::TextBatch> straight;
    int64_t steps = 0;
    {
      data::TextLoader loader(runtime(), o);
      steps = loader.sampler().steps_per_epoch();
      ASSERT_GE(steps, 3);
      for (int64_t i = 0; i < steps + 3; ++i) straight.push_back(loader.next());
    }
    // Resume after batch j (mid-epoch and at the end of the epoch).
    for (int64_t j : {int64_t(0), steps - 2, steps - 1}) {
      data::TextLoaderOptions r = o;
      r.epoch = straight[size_t(j)].epoch;
      r.position = straight[size_t(j)].next_position;
      data::TextLoader resumed(runtime(), r);
      for (size_t k = size_t(j) + 1; k < straight.size(); ++k) {
        const auto b = resumed.next();
        EXPECT_EQ(b.epoch, straight[k].epoch) << "mode " << mode << " resumed after " << j;
        EXPECT_EQ(b.step, straight[k].step);
        EXPECT_EQ(b.next_position, straight[k].next_position);
        EXPECT_TRUE(b.rows.equal(straight[k].rows));
        EXPECT_TRUE(b.tokens.equal(straight[k].tokens));
        EXPECT_TRUE(b.targets.equal(straight[k].targets));
      }
    }
  }
}

// Destroyed right after it starts (the I/O thread mid-read) or mid-epoch with its queue full, the
// loader stops its thread at once.
TEST(TextLoader, DestroyedWithBatchesInFlightStopsPromptly) {
  data::TextLoaderOptions o;
  o.path = text_file();
  o.seq_len = 12;
  o.batch_size = 2;
  o.prefetch = 2;
  for (int taken = 0; taken < 2; ++taken) {
    auto loader = std::make_unique<data::TextLoader>(runtime(), o);
    for (int i = 0; i < taken; ++i) loader->next();
    if (taken > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto t0 = std::chrono::steady_clock::now();
    loader.reset();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0) << taken;
  }
}

TEST(TextLoader, NonTextFilesAndImpossibleShapesAreUserErrorsOnEveryRank) {
  reference();
  data::PrepSyntheticOptions io;
  io.out = text_dir() + "/images.h5";
  io.count = 6;
  io.size = 32;
  io.captions_per_image = 1;
  io.context_length = 8;
  io.vocab_size = 200;
  io.block = 2;
  data::prep_synthetic_image_text(runtime(), io);
  data::TextLoaderOptions o;
  o.path = io.out;
  o.seq_len = 8;
  o.batch_size = 1;
  EXPECT_EQ(message_of([&] { data::TextLoader loader(runtime(), o); }),
            io.out +
                ": attribute 'kind': the text loader reads 'text' files (prep text / prep synthetic --kind text), "
                "not 'image_text'");
  o.path = text_file();
  o.seq_len = int64_t(reference().tokens.size());
  EXPECT_NE(message_of([&] { data::TextLoader loader(runtime(), o); }).find("give no sequence of data.seq_len"),
            std::string::npos);
  o.seq_len = 16;
  o.batch_size = 1000;
  // The advice names config keys that exist (train.batch, data.seq_len), not CLI options or drop_last.
  const std::string too_few = message_of([&] { data::TextLoader loader(runtime(), o); });
  EXPECT_NE(too_few.find(" = train.batch 1000 per rank x " + std::to_string(runtime().size()) + " rank"),
            std::string::npos)
      << too_few;
  EXPECT_EQ(too_few.substr(too_few.find(");")), "); lower train.batch or data.seq_len");
  o.path = text_dir() + "/missing.h5";
  o.batch_size = 1;
  EXPECT_NE(message_of([&] { data::TextLoader loader(runtime(), o); }).find("does not exist"), std::string::npos);
}

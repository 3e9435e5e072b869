#include "meridian/data/text_loader.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "collective_open.h"
#include "h5.h"
#include "meridian/comm/agree.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/error.h"
#include "meridian/core/hash.h"
#include "pipeline.h"

namespace meridian::data {

struct TextLoader::Impl {
  TextLoaderOptions o;
  DatasetInfo info;
  h5::Id file, tokens, mask;
  std::vector<int64_t> offsets;  // /doc_offsets, [N + 1]
  int64_t samples = 0;
  std::unique_ptr<DistributedSampler> sampler;
  // Per-sample read buffers (I/O thread only).
  std::vector<int32_t> tok_buf;
  std::vector<uint8_t> mask_buf;
  std::optional<Pipeline<TextBatch>> pipeline;  // reads with read_batch() on its I/O thread, nothing to finish

  explicit Impl(const TextLoaderOptions& options) : o(options) {}

  ~Impl() {
    const auto locked = h5::lock();
    mask.reset();
    tokens.reset();
    file.reset();
  }

  void open() {
    info = validate_dataset(o.path);
    if (info.kind != "text")
      throw DataError(
          o.path, "attribute 'kind'",
          "the text loader reads 'text' files (prep text / prep synthetic --kind text), not '" + info.kind + "'");
    const auto locked = h5::lock();
    file = h5::file_id(MERIDIAN_H5_CHECK(H5Fopen(o.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)));
    tokens = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file, "/tokens", H5P_DEFAULT)));
    mask = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file, "/loss_mask", H5P_DEFAULT)));
    h5::Id off = h5::dataset_id(MERIDIAN_H5_CHECK(H5Dopen2(file, "/doc_offsets", H5P_DEFAULT)));
    offsets.resize(size_t(info.count + 1));
    MERIDIAN_H5_CHECK(H5Dread(off, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets.data()));
  }

  // Hash of the file size, root attributes and the first tokens: equal on ranks seeing the same file.
  std::string fingerprint() {
    std::string text = std::to_string(info.file_bytes) + "|" + info.kind + "|" + info.created_by + "|" +
                       std::to_string(info.count) + "|" + std::to_string(info.token_count);
    const int64_t n = std::min<int64_t>(info.token_count, 4096);
    std::vector<int32_t> first(size_t(std::max<int64_t>(n, 1)));
    std::vector<uint8_t> first_mask(first.size());
    read(0, n, first.data(), first_mask.data());
    uint64_t h = fnv1a(text.data(), text.size());
    h = fnv1a(first.data(), size_t(n) * sizeof(int32_t), h);
    h = fnv1a(first_mask.data(), size_t(n), h);
    h = fnv1a(offsets.data(), offsets.size() * sizeof(int64_t), h);
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)h);
    return buf;
  }

  // Tokens and loss mask [start, start + count): one hyperslab read of each.
  void read(int64_t start, int64_t count, int32_t* tok, uint8_t* msk) {
    if (count <= 0) return;
    const auto locked = h5::lock();
    const hsize_t off[1] = {hsize_t(start)}, cnt[1] = {hsize_t(count)};
    for (auto [dset, type, out] : {std::tuple<hid_t, hid_t, void*>{tokens, H5T_NATIVE_INT32, tok},
                                   std::tuple<hid_t, hid_t, void*>{mask, H5T_NATIVE_UINT8, msk}}) {
      h5::Id fspace = h5::space_id(MERIDIAN_H5_CHECK(H5Dget_space(dset)));
      MERIDIAN_H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, nullptr, cnt, nullptr));
      h5::Id mspace = h5::space_id(MERIDIAN_H5_CHECK(H5Screate_simple(1, cnt, nullptr)));
      MERIDIAN_H5_CHECK(H5Dread(dset, type, mspace, fspace, H5P_DEFAULT, out));
    }
  }

  // Fills row `i` of tokens/targets [*, L] for sample `row`.
  void fill(int64_t row, int64_t* tok_out, int64_t* tgt_out) {
    const int64_t L = o.seq_len;
    if (o.mode == TextLoaderOptions::Pack) {
      const int64_t a = row * L;
      read(a, L + 1, tok_buf.data(), mask_buf.data());
      // The first document start after a: positions where a new document begins.
      auto next = std::upper_bound(offsets.begin(), offsets.end() - 1, a);
      for (int64_t t = 0; t < L; ++t) {
        const int64_t p = a + t + 1;  // position of the target token
        while (next != offsets.end() - 1 && *next < p) ++next;
        const bool crosses = next != offsets.end() - 1 && *next == p;  // p starts a document
        tok_out[t] = tok_buf[size_t(t)];
        tgt_out[t] = !crosses && mask_buf[size_t(t + 1)] ? int64_t(tok_buf[size_t(t + 1)]) : kIgnoreIndex;
      }
    } else {
      const int64_t s = offsets[size_t(row)];
      const int64_t len = std::min(offsets[size_t(row) + 1] - s, L + 1);
      read(s, len, tok_buf.data(), mask_buf.data());
      for (int64_t t = 0; t < L; ++t) {
        tok_out[t] = t < len ? int64_t(tok_buf[size_t(t)]) : int64_t(info.pad_id);
        tgt_out[t] = t + 1 < len && mask_buf[size_t(t + 1)] ? int64_t(tok_buf[size_t(t + 1)]) : kIgnoreIndex;
      }
    }
  }

  TextBatch read_batch(const BatchIndex& at) {
    const auto rows = sampler->batch(at.epoch, at.position);
    const int64_t B = int64_t(rows.size()), L = o.seq_len;
    TextBatch b;
    const auto options = at::TensorOptions().dtype(at::kLong).pinned_memory(o.pinned);
    b.tokens = at::empty({B, L}, options);
    b.targets = at::empty({B, L}, options);
    b.rows = at::tensor(rows, at::kLong);
    int64_t* tok = b.tokens.data_ptr<int64_t>();
    int64_t* tgt = b.targets.data_ptr<int64_t>();
    for (int64_t i = 0; i < B; ++i) fill(rows[size_t(i)], tok + i * L, tgt + i * L);
    return b;
  }
};

TextLoader::TextLoader(const comm::Runtime& rt, const TextLoaderOptions& options)
    : impl_(std::make_unique<Impl>(options)) {
  if (options.seq_len < 1) throw UserError("--seq-len: must be at least 1");
  if (options.batch_size < 1) throw UserError("--batch: must be at least 1");
  if (options.prefetch < 1) throw UserError("--prefetch: must be at least 1");
  if (options.epoch < 0 || options.position < 0)
    throw UserError("text loader: epoch and position must be >= 0 (got " + std::to_string(options.epoch) + ", " +
                    std::to_string(options.position) + ")");
  // Open on every rank; agree on success before comparing, so one rank's error is everyone's (this
  // rank's own problem first).
  std::string fingerprint;
  comm::agree<UserError>(
      rt,
      [&] {
        impl_->open();
        fingerprint = impl_->fingerprint();
      },
      [&](const comm::Failure& f) {
        if (f.mine) std::rethrow_exception(f.mine);
        throw UserError("rank " + std::to_string(f.rank) + ": " + f.message);
      });
  require_same_dataset(rt, options.path, fingerprint);
  const auto& info = impl_->info;
  const int64_t L = options.seq_len;
  impl_->samples = options.mode == TextLoaderOptions::Pack ? (info.token_count - 1) / L : info.count;
  if (impl_->samples < 1)
    throw UserError(options.path + ": " + std::to_string(info.token_count) +
                    " tokens give no sequence of data.seq_len " + std::to_string(L) +
                    " + 1 tokens; lower data.seq_len");
  const bool pack = options.mode == TextLoaderOptions::Pack;
  impl_->sampler = DistributedSampler::for_loader(
      options.path, impl_->samples, pack ? "windows of data.seq_len + 1 tokens" : "documents", options.batch_size,
      rt.rank(), rt.size(), options.seed, options.drop_last, pack ? " or data.seq_len" : "");
  impl_->tok_buf.resize(size_t(L + 1));
  impl_->mask_buf.resize(size_t(L + 1));
  Impl* impl = impl_.get();
  impl->pipeline.emplace("text loader", *impl->sampler, options.epoch, options.position, size_t(options.prefetch),
                         [impl](const BatchIndex& at) { return impl->read_batch(at); });
}

// The thread stops before ~Impl closes the HDF5 ids it reads.
TextLoader::~TextLoader() { impl_->pipeline.reset(); }

TextBatch TextLoader::next() { return impl_->pipeline->next(); }

void TextLoader::set_shares(const std::vector<int64_t>& shares, int64_t epoch, int64_t position) {
  Impl* impl = impl_.get();
  impl->sampler->check_shares(shares);  // here, not on the I/O thread
  impl->pipeline->redirect(epoch, position, [impl, shares] { impl->sampler->set_shares(shares); });
}

const DatasetInfo& TextLoader::info() const { return impl_->info; }
const DistributedSampler& TextLoader::sampler() const { return *impl_->sampler; }
int64_t TextLoader::samples() const { return impl_->samples; }

}  // namespace meridian::data

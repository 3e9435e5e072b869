// The checkpoint file's Writer and Reader directly (1 and 2 ranks):
//  - the shares of a replicated tensor: contiguous, in rank order, whole checksum blocks, covering
//    every row, for any world size (closed form, in one process);
//  - round trips of replicated tensors (float32 over several blocks, bfloat16, float16, int64,
//    uint8, 0-dim, empty), sharded ranges, per-rank tensors and attributes, read whole and by rows;
//  - the crc32c attribute equals the checksum of each block computed here from the source tensor;
//  - one flipped byte on disk is a DataError naming the file, the tensor and the block's rows, while
//    the other blocks still read;
//  - a sharded range that breaks the block rules on one rank is a SystemError on every rank.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/file.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/crc32c.h"
#include "meridian/core/error.h"
#include "mpi_test_main.h"

using meridian::test::runtime;
namespace ckpt = meridian::ckpt;

namespace {

// A scratch file name in a new directory, the same on every rank (removed after the last test, or
// with remove_scratch).
std::string scratch_file(const std::string& name) {
  return meridian::test::shared_temp_dir("meridian-file") + "/" + name;
}

void remove_scratch(const std::string& path) {
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

// Values that differ in every element and do not depend on the rank (replicated tensors).
at::Tensor ramp(std::vector<int64_t> shape, at::ScalarType dtype) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return (at::arange(n, at::kDouble).remainder(1000) * 0.25 - 7).to(dtype).reshape(shape);
}

// 3000 x 1000 float32: 4000-byte rows, 1048 rows per 4 MiB checksum block, 3 blocks.
constexpr int64_t kRows = 3000, kCols = 1000, kBlockRows = (4 << 20) / (kCols * 4);

TEST(CheckpointFile, SharesAreContiguousWholeBlocksInRankOrder) {
  const at::Tensor big = at::empty({kRows, kCols}, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  const at::Tensor scalar = at::empty({}, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  for (int world = 1; world <= 5; ++world) {
    int64_t next = 0;
    for (int r = 0; r < world; ++r) {
      const auto [first, last] = ckpt::Writer::share(big, r, world);
      const int64_t blocks = (kRows + kBlockRows - 1) / kBlockRows;
      EXPECT_EQ(first, std::min(kRows, blocks * r / world * kBlockRows)) << world << " ranks, rank " << r;
      EXPECT_EQ(first, next) << world << " ranks, rank " << r;
      EXPECT_EQ(first % kBlockRows, 0) << world << " ranks, rank " << r;
      EXPECT_TRUE(last == kRows || last % kBlockRows == 0) << world << " ranks, rank " << r;
      next = std::max(first, last);
    }
    EXPECT_EQ(next, kRows) << world << " ranks";
    // A 0-dim tensor is one row: exactly one rank writes it.
    int64_t writers = 0;
    for (int r = 0; r < world; ++r) {
      const auto [first, last] = ckpt::Writer::share(scalar, r, world);
      writers += last - first;
    }
    EXPECT_EQ(writers, 1) << world << " ranks";
  }
}

// The file every round-trip test reads: written by every rank.
struct Written {
  std::string path;
  at::Tensor big, bf16, half, longs, bytes, scalar, empty;
  int64_t total = 0;
};

// Rank r's elements of the sharded vector: [first, first + count) with blocks of `block`.
constexpr int64_t kBlock = 64;
std::pair<int64_t, int64_t> shard_range(int rank, int world, int64_t total) {
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  const int64_t first = std::min(total, blocks * rank / world * kBlock);
  const int64_t last = std::min(total, blocks * (rank + 1) / world * kBlock);
  return {first, last - first};
}

Written write_file() {
  Written w;
  w.path = scratch_file("file.h5");
  w.big = ramp({kRows, kCols}, at::kFloat);
  w.bf16 = ramp({33, 5}, at::kBFloat16);
  w.half = ramp({7}, at::kHalf);
  w.longs = ramp({4, 3, 2}, at::kLong);
  w.bytes = ramp({300}, at::kByte);
  w.scalar = at::scalar_tensor(2.5, at::kDouble);
  w.empty = at::empty({0, 4}, at::kFloat);
  w.total = 1000;
  const auto& rt = runtime();
  ckpt::Writer writer(rt, w.path);
  writer.replicated("model/big", w.big);
  writer.replicated("model/bf16", w.bf16);
  writer.replicated("model/half", w.half);
  writer.replicated("model/longs", w.longs);
  writer.replicated("model/bytes", w.bytes);
  writer.replicated("scalar", w.scalar);
  writer.replicated("empty", w.empty);
  const auto [first, count] = shard_range(rt.rank(), rt.size(), w.total);
  writer.sharded("optim/flat", w.total, first, at::arange(first, first + count, at::kFloat), kBlock);
  writer.per_rank("rng", at::full({rt.rank() + 1}, rt.rank(), at::kLong));
  writer.attribute("step", int64_t(42));
  writer.attribute("config", std::string("train: {steps: 3}"));
  writer.close();
  return w;
}

TEST(CheckpointFile, RoundTripsEveryKindOfTensor) {
  const Written w = write_file();
  const ckpt::Reader r(w.path);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"empty", "model/bf16", "model/big", "model/bytes", "model/half",
                                                 "model/longs", "optim/flat", "scalar"}));
  for (const auto& [name, want] : std::vector<std::pair<std::string, at::Tensor>>{{"model/big", w.big},
                                                                                  {"model/bf16", w.bf16},
                                                                                  {"model/half", w.half},
                                                                                  {"model/longs", w.longs},
                                                                                  {"model/bytes", w.bytes},
                                                                                  {"scalar", w.scalar},
                                                                                  {"empty", w.empty}}) {
    const at::Tensor got = r.read(name);
    EXPECT_EQ(got.scalar_type(), want.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), want.sizes()) << name;
    EXPECT_TRUE(at::equal(got, want)) << name;
    EXPECT_EQ(r.shape(name), want.sizes().vec()) << name;
  }
  // Rows across block boundaries, inside one block, none.
  for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 1}, {kBlockRows - 3, 7}, {1, kRows - 2}, {2 * kBlockRows, kRows - 2 * kBlockRows}, {kRows, 0}}) {
    const at::Tensor got = r.read_rows("model/big", first, count);
    EXPECT_TRUE(at::equal(got, w.big.narrow(0, first, count))) << "rows " << first << " + " << count;
  }
  EXPECT_THROW(r.read_rows("model/big", kRows - 1, 2), meridian::DataError);
  EXPECT_TRUE(at::equal(r.read("optim/flat"), at::arange(w.total, at::kFloat)));
  EXPECT_TRUE(at::equal(r.read_rows("optim/flat", 60, 10), at::arange(60, 70, at::kFloat)));
  EXPECT_EQ(r.world_size_written(), runtime().size());
  for (int q = 0; q < runtime().size(); ++q) {
    const std::string name = "ranks/" + std::to_string(q) + "/rng";
    ASSERT_TRUE(r.has(name)) << name;
    EXPECT_TRUE(at::equal(r.read(name), at::full({q + 1}, q, at::kLong))) << name;
  }
  EXPECT_EQ(r.int_attribute("step"), 42);
  EXPECT_EQ(r.int_attribute("format_version"), 1);
  EXPECT_EQ(r.string_attribute("config"), std::string("train: {steps: 3}"));
  EXPECT_FALSE(r.int_attribute("missing").has_value());
  EXPECT_NO_THROW(r.verify());
  EXPECT_TRUE(ckpt::is_checkpoint(w.path));
  remove_scratch(w.path);
}

// The crc32c attribute of `dataset` and its block_rows, read with HDF5 itself.
std::pair<std::vector<uint32_t>, int64_t> stored_checksums(const std::string& path, const std::string& dataset) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const hid_t a = H5Aopen(d, "crc32c", H5P_DEFAULT);
  const hid_t space = H5Aget_space(a);
  std::vector<uint32_t> crcs(size_t(H5Sget_simple_extent_npoints(space)));
  H5Aread(a, H5T_NATIVE_UINT32, crcs.data());
  int64_t block_rows = 0;
  const hid_t b = H5Aopen(d, "block_rows", H5P_DEFAULT);
  H5Aread(b, H5T_NATIVE_INT64, &block_rows);
  H5Aclose(b), H5Sclose(space), H5Aclose(a), H5Dclose(d), H5Fclose(f);
  return {crcs, block_rows};
}

// Where `dataset`'s contiguous bytes start in the file.
int64_t data_offset(const std::string& path, const std::string& dataset) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const haddr_t offset = H5Dget_offset(d);
  H5Dclose(d), H5Fclose(f);
  return offset == HADDR_UNDEF ? -1 : int64_t(offset);
}

TEST(CheckpointFile, ChecksumsAreThoseOfEachBlock) {
  const Written w = write_file();
  if (runtime().rank() == 0) {
    const auto [crcs, block_rows] = stored_checksums(w.path, "model/big");
    EXPECT_EQ(block_rows, kBlockRows);
    ASSERT_EQ(crcs.size(), size_t((kRows + kBlockRows - 1) / kBlockRows));
    for (size_t b = 0; b < crcs.size(); ++b) {
      const at::Tensor rows =
          w.big.narrow(0, int64_t(b) * kBlockRows, std::min(kBlockRows, kRows - int64_t(b) * kBlockRows));
      EXPECT_EQ(crcs[b], meridian::crc32c(rows.data_ptr(), rows.nbytes())) << "block " << b;
    }
    const auto [flat_crcs, flat_block] = stored_checksums(w.path, "optim/flat");
    EXPECT_EQ(flat_block, kBlock);
    const at::Tensor flat = at::arange(w.total, at::kFloat);
    ASSERT_EQ(flat_crcs.size(), size_t((w.total + kBlock - 1) / kBlock));
    for (size_t b = 0; b < flat_crcs.size(); ++b) {
      const at::Tensor part = flat.narrow(0, int64_t(b) * kBlock, std::min(kBlock, w.total - int64_t(b) * kBlock));
      EXPECT_EQ(flat_crcs[b], meridian::crc32c(part.data_ptr(), part.nbytes())) << "block " << b;
    }
  }
  remove_scratch(w.path);
}

TEST(CheckpointFile, ACorruptBlockIsDetectedAndNamed) {
  const Written w = write_file();
  if (runtime().rank() == 0) {  // one byte of the second block flipped on disk
    const int64_t offset = data_offset(w.path, "model/big");
    ASSERT_GE(offset, 0);
    const int64_t at = offset + (kBlockRows + 5) * kCols * 4 + 2;
    std::FILE* f = std::fopen(w.path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, long(at), SEEK_SET);
    const int c = std::fgetc(f);
    std::fseek(f, long(at), SEEK_SET);
    std::fputc(c ^ 0x10, f);
    std::fclose(f);
  }
  runtime().barrier();
  // The whole-file checksum refuses the file before HDF5 opens it, naming the bytes...
  try {
    const ckpt::Reader refused(w.path);
    ADD_FAILURE() << "a corrupt file was opened";
  } catch (const meridian::DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(w.path + ": checksum: bytes 4096-", 0), 0u) << e.what();
  }
  // ... and past it (--no-verify), each block's own checksum names the rows.
  ckpt::set_verify_checksums(false);
  const ckpt::Reader r(w.path);
  ckpt::set_verify_checksums(true);
  const std::string rows = "rows " + std::to_string(kBlockRows) + ".." + std::to_string(2 * kBlockRows - 1);
  for (const auto& read : std::vector<std::function<void()>>{
           [&] { r.read("model/big"); }, [&] { r.read_rows("model/big", kBlockRows + 5, 1); }, [&] { r.verify(); }}) {
    try {
      read();
      ADD_FAILURE() << "the corrupt block was read";
    } catch (const meridian::DataError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(w.path), std::string::npos) << what;
      EXPECT_NE(what.find("'model/big'"), std::string::npos) << what;
      EXPECT_NE(what.find("checksum mismatch in " + rows), std::string::npos) << what;
    }
  }
  // The blocks around it still read.
  EXPECT_TRUE(at::equal(r.read_rows("model/big", 0, kBlockRows), w.big.narrow(0, 0, kBlockRows)));
  EXPECT_TRUE(at::equal(r.read_rows("model/big", 2 * kBlockRows, 10), w.big.narrow(0, 2 * kBlockRows, 10)));
  remove_scratch(w.path);
}

TEST(CheckpointFile, AMisalignedShardOnOneRankFailsEveryRank) {
  const std::string path = scratch_file("misaligned.h5");
  const auto& rt = runtime();
  try {
    ckpt::Writer writer(rt, path);
    // The last rank's range starts one element late.
    auto [first, count] = shard_range(rt.rank(), rt.size(), 1000);
    if (rt.rank() == rt.size() - 1 && count > 0) ++first, --count;
    writer.sharded("optim/flat", 1000, first, at::zeros({count}), kBlock);
    ADD_FAILURE() << "a misaligned range was written";
  } catch (const meridian::SystemError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("on rank " + std::to_string(rt.size() - 1)), std::string::npos) << what;
    EXPECT_NE(what.find("not aligned to blocks of 64"), std::string::npos) << what;
  }
  remove_scratch(path);
}

}  // namespace

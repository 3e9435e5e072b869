#include "seal.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/files.h"
#include "meridian/comm/agree.h"
#include "meridian/comm/mpi_interop.h"
#include "meridian/comm/runtime.h"
#include "meridian/core/crc32c.h"
#include "meridian/core/error.h"

namespace meridian::ckpt {

namespace {

constexpr const char* kMagic = "meridian-checkpoint-checksum 1\n";
constexpr char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
constexpr uint64_t kMinChunk = uint64_t(64) << 20, kMaxChunks = 400;  // 400 x 9 hex digits fit the block

std::atomic<bool> g_verify{true};

// The chunk size for a file of `size` bytes: 64 MiB, or more (whole MiB) to stay within kMaxChunks.
uint64_t chunk_for(uint64_t size) {
  const uint64_t payload = size > kSealBytes ? size - kSealBytes : 0, mib = uint64_t(1) << 20;
  const uint64_t need = (payload + kMaxChunks - 1) / kMaxChunks;
  return std::max(kMinChunk, (need + mib - 1) / mib * mib);
}

// CRC-32C of bytes [first, last) of `path`, read 8 MiB at a time.
uint32_t checksum_range(const std::string& path, uint64_t first, uint64_t last) {
  static constexpr size_t kPiece = size_t(8) << 20;
  std::vector<char> buffer(std::min<uint64_t>(kPiece, last - first));
  uint32_t crc = 0;
  for (uint64_t at = first; at < last;) {
    const size_t n = size_t(std::min<uint64_t>(kPiece, last - at));
    files().read_at(path, at, buffer.data(), n);
    crc = crc32c_extend(crc, buffer.data(), n);
    at += n;
  }
  return crc;
}

// Files verified (or found unsealed and said so) in this process: device, inode, size, mtime.
using Identity = std::tuple<uint64_t, uint64_t, int64_t, int64_t>;
std::mutex g_known_mutex;
std::set<Identity> g_verified, g_unsealed_said;

std::optional<Identity> identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return Identity{uint64_t(st.st_dev), uint64_t(st.st_ino), int64_t(st.st_size),
                  int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

void remember(std::set<Identity>& set, const std::string& path) {
  if (const auto id = identity(path)) {
    std::lock_guard<std::mutex> lock(g_known_mutex);
    set.insert(*id);
  }
}

bool known(const std::set<Identity>& set, const std::string& path) {
  const auto id = identity(path);
  std::lock_guard<std::mutex> lock(g_known_mutex);
  return id && set.count(*id) > 0;
}

std::string hex(uint32_t v) { return fmt::format("{:08x}", v); }

}  // namespace

void set_verify_checksums(bool verify) { g_verify = verify; }

double seal_file(const comm::Runtime& rt, const comm::OwnComm* own, const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rank = rt.rank(), ranks = rt.size();
  uint64_t size = 0;
  std::string mine;  // "<chunk>:<crc> ..." of this rank's chunks
  const auto failed = [&](const comm::Failure& f) {
    throw SystemError(path + ": cannot checksum the checkpoint (rank " + std::to_string(f.rank) + "): " + f.message);
  };
  comm::agree(
      rt, own,
      [&] {
        size = files().size(path);
        const uint64_t chunk = chunk_for(size), payload = size - std::min(size, kSealBytes);
        const uint64_t chunks = (payload + chunk - 1) / chunk;
        for (uint64_t k = uint64_t(rank); k < chunks; k += uint64_t(ranks)) {
          const uint64_t first = kSealBytes + k * chunk, last = std::min(size, first + chunk);
          mine += fmt::format("{}:{} ", k, hex(checksum_range(path, first, last)));
        }
      },
      failed);
  const std::vector<std::string> all = own ? comm::allgather_strings(rt, own->get(), mine) : rt.allgather(mine);
  comm::agree(
      rt, own,
      [&] {
        if (rank != 0) return;
        const uint64_t chunk = chunk_for(size);
        std::vector<std::string> crcs(size_t((size - std::min(size, kSealBytes) + chunk - 1) / chunk));
        for (const auto& part : all) {
          std::istringstream in(part);
          for (std::string item; in >> item;)
            crcs.at(std::stoull(item.substr(0, item.find(':')))) = item.substr(item.find(':') + 1);
        }
        std::string text = std::string(kMagic) + fmt::format("bytes {}\nchunk {}\ncrc32c", size, chunk);
        for (const auto& c : crcs) text += " " + c;
        text += "\n";
        text += "end " + hex(crc32c(text.data(), text.size())) + "\n";
        if (text.size() > kSealBytes) throw std::logic_error("checkpoint checksum header over its block");
        text.resize(size_t(kSealBytes), '\0');
        files().write_at(path, 0, text);
        remember(g_verified, path);
      },
      failed);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace {

struct Header {
  uint64_t bytes = 0, chunk = 0;
  std::vector<std::string> crcs;  // hex, one per chunk
};

DataError corrupt(const std::string& path, const std::string& why) { return DataError(path, "checksum", why); }

// The file's checksum header; nullopt for a plain HDF5 file (unsealed). DataError when it is neither,
// or when the header or the file's size does not match.
std::optional<Header> read_header(const std::string& path) {
  uint64_t size = 0;
  std::string text(size_t(kSealBytes), '\0');
  try {
    size = files().size(path);
    files().read_at(path, 0, text.data(), size_t(std::min<uint64_t>(size, kSealBytes)));
  } catch (const SystemError& e) {
    throw DataError(path, "file", e.what());
  }
  if (size >= 8 && std::memcmp(text.data(), kHdf5Signature, 8) == 0) return std::nullopt;
  if (text.compare(0, std::strlen(kMagic), kMagic) != 0)
    throw corrupt(path,
                  "neither a checksummed meridian checkpoint nor an HDF5 file (its first bytes are damaged, or it is "
                  "empty or another kind of file)");
  const size_t end_at = text.find("\nend ");
  if (end_at == std::string::npos) throw corrupt(path, "the checksum header is damaged (no end line)");
  uint32_t recorded = 0;
  std::istringstream(text.substr(end_at + 5, 8)) >> std::hex >> recorded;
  if (crc32c(text.data(), end_at + 1) != recorded) throw corrupt(path, "the checksum header is damaged");
  std::istringstream in(text.substr(std::strlen(kMagic), end_at + 1 - std::strlen(kMagic)));
  Header h;
  std::string word;
  in >> word >> h.bytes >> word >> h.chunk >> word;
  for (std::string crc; in >> crc;) h.crcs.push_back(crc);
  if (h.bytes != size)
    throw corrupt(path,
                  fmt::format("the file has {} bytes; it had {} when written (truncated or extended)", size, h.bytes));
  // Chunks as seal_file makes them (whole MiB, 64 MiB up to 64 GiB), so that no arithmetic below wraps.
  const uint64_t mib = uint64_t(1) << 20;
  if (h.chunk < kMinChunk || h.chunk > (uint64_t(1) << 36) || h.chunk % mib != 0 || size < kSealBytes ||
      h.crcs.size() != (size - kSealBytes + h.chunk - 1) / h.chunk)
    throw corrupt(path, "the checksum header is damaged (its chunks do not cover the file)");
  return h;
}

// Chunks first, first + step, ... of the file against the header.
void verify_chunks(const std::string& path, const Header& h, size_t first, size_t step) {
  for (size_t k = first; k < h.crcs.size(); k += step) {
    const uint64_t from = kSealBytes + k * h.chunk, to = std::min(h.bytes, from + h.chunk);
    const std::string actual = hex(checksum_range(path, from, to));
    if (actual != h.crcs[k])
      throw corrupt(path, fmt::format("bytes {}-{} do not match their checksum (crc32c {}, written {}): the file is "
                                      "corrupt",
                                      from, to, actual, h.crcs[k]));
  }
}

void say_unsealed(const std::string& path) {
  if (known(g_unsealed_said, path)) return;
  spdlog::warn("{}: no whole-file checksum (written by a meridian before 2026-12): read without verifying it", path);
  remember(g_unsealed_said, path);
}

}  // namespace

Seal check_seal(const std::string& path) {
  if (!g_verify) return Seal::Skipped;
  if (known(g_verified, path)) return Seal::Verified;
  const auto header = read_header(path);
  if (!header) {
    say_unsealed(path);
    return Seal::Unsealed;
  }
  verify_chunks(path, *header, 0, 1);
  remember(g_verified, path);
  return Seal::Verified;
}

Seal check_seal(const comm::Runtime& rt, const std::string& path) {
  if (!g_verify) return Seal::Skipped;
  bool sealed = false;
  comm::agree(
      rt,
      [&] {
        // A rank that verified the whole file already (rank 0 choosing the resume point) reads nothing.
        if ((sealed = known(g_verified, path))) return;
        const auto header = read_header(path);
        sealed = header.has_value();
        if (header) verify_chunks(path, *header, size_t(rt.rank()), size_t(rt.size()));
      },
      [&](const comm::Failure& f) {
        if (f.mine) std::rethrow_exception(f.mine);
        throw UserError(f.message);
      });
  if (!sealed) {
    if (rt.rank() == 0) say_unsealed(path);
    return Seal::Unsealed;
  }
  remember(g_verified, path);
  return Seal::Verified;
}

bool starts_as_checkpoint(const std::string& path) {
  char first[8] = {0};
  try {
    files().read_at(path, 0, first, sizeof first);
  } catch (const SystemError&) {
    return false;  // missing, unreadable or under 8 bytes
  }
  return std::memcmp(first, kMagic, sizeof first) == 0 || std::memcmp(first, kHdf5Signature, sizeof first) == 0;
}

}  // namespace meridian::ckpt

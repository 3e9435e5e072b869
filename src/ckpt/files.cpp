#include "meridian/ckpt/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "meridian/core/error.h"
#include "meridian/core/files.h"

namespace meridian::ckpt {

namespace fs = std::filesystem;

uint64_t Files::size(const std::string& path) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  if (ec) throw SystemError("cannot read " + path + ": " + ec.message());
  return n;
}

void Files::read_at(const std::string& path, uint64_t offset, void* data, size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw SystemError("cannot read " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, static_cast<char*>(data) + done, n - done, off_t(offset + done));
    if (got <= 0) {
      const std::string why = got == 0 ? "the file ends early" : std::strerror(errno);
      ::close(fd);
      throw SystemError("cannot read " + path + " at byte " + std::to_string(offset + done) + ": " + why);
    }
    done += size_t(got);
  }
  ::close(fd);
}

void Files::write_at(const std::string& path, uint64_t offset, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  bool ok =
      fd >= 0 && ::pwrite(fd, bytes.data(), bytes.size(), off_t(offset)) == ssize_t(bytes.size()) && ::fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0 && ::close(fd) != 0) ok = false;
  if (!ok) throw SystemError("cannot write " + path + ": " + std::strerror(err));
}

void Files::create_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw SystemError("cannot create the checkpoint directory '" + dir + "': " + ec.message());
}

void Files::rename(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw SystemError("cannot rename " + from + " to " + to + ": " + ec.message());
}

void Files::remove(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) throw SystemError("cannot remove " + path + ": " + ec.message());
}

void Files::sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw SystemError(std::string("fsync failed: ") + std::strerror(err));
  }
  ::close(fd);
}

void Files::sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  int err = 0;
  if (fd < 0 || ::fsync(fd) != 0) err = errno;
  if (fd >= 0) ::close(fd);
  // Some file systems cannot sync a directory (EINVAL): their renames are as durable as they get.
  if (err != 0 && err != EINVAL) throw SystemError("cannot fsync the directory '" + dir + "': " + std::strerror(err));
}

void Files::write_small(const std::string& path, const std::string& contents) { write_file_atomically(path, contents); }

std::optional<std::string> Files::read_small(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void Files::link(const std::string& target, const std::string& path) {
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (!ec) fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw SystemError("cannot point " + path + " at " + target + ": " + ec.message());
  }
}

std::optional<std::string> Files::read_link(const std::string& path) {
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) return std::nullopt;
  const auto target = fs::read_symlink(path, ec);
  if (ec) return std::nullopt;
  return target.string();
}

std::vector<std::string> Files::list(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return names;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) names.push_back(it->path().filename().string());
  if (ec) throw SystemError("cannot list " + dir + ": " + ec.message());
  return names;
}

namespace {
Files g_real;
std::atomic<Files*> g_files{&g_real};
}  // namespace

Files& files() { return *g_files.load(); }
void set_files(Files* replacement) { g_files.store(replacement ? replacement : &g_real); }

}  // namespace meridian::ckpt

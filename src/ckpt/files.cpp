#include "meridian/ckpt/files.h"

#include <atomic>
#include <filesystem>

#include "meridian/core/error.h"

namespace meridian::ckpt {

void Files::rename(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::rename(from, to, ec);
  if (ec) throw SystemError("cannot rename " + from + " to " + to + ": " + ec.message());
}

namespace {
Files g_real;
std::atomic<Files*> g_files{&g_real};
}  // namespace

Files& files() { return *g_files.load(); }
void set_files(Files* replacement) { g_files.store(replacement ? replacement : &g_real); }

}  // namespace meridian::ckpt

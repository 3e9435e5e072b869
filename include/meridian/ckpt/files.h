// The file operations under checkpoints, behind one interface (leveldb's Env): the process's
// implementation does them; a test installs one that fails chosen operations (a full disk, an I/O
// error, a short read, a failed rename) and checks that every rank gets a clear error, `latest`
// stays where it was and no partial file looks valid.
//
// The data itself moves through HDF5's MPI-IO driver; on_write and on_read are called around those
// transfers (inside the Writer's agreed steps and after the Reader's reads), so a fault they inject
// takes the same path as a failure of the transfer. Calls come from any thread that writes or reads a
// checkpoint (a background save's included): implementations must be thread-safe.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace meridian::ckpt {

class Files {
 public:
  virtual ~Files() = default;
  // After this rank wrote its part of `dataset` into `path` (the collective calls done, as when the
  // transfer itself returns an error); throwing fails the write (SystemError text: what the OS would
  // say).
  virtual void on_write(const std::string& path, const std::string& dataset) {}
  // After this rank read `data` (raw bytes, possibly part of the dataset) from `path`: throwing fails
  // the read; changing `data` stands for a short or corrupted read (the checksums must catch it).
  virtual void on_read(const std::string& path, const std::string& dataset, at::Tensor& data) {}
  // Renames `from` to `to` atomically (replacing `to`); SystemError naming both and the reason.
  virtual void rename(const std::string& from, const std::string& to);
};

// The process's file layer (the real one unless a test installed another).
Files& files();
// Tests: `replacement` is used until the next call; null restores the real one. Not thread-safe
// against checkpoint I/O in flight: install before a save, not during one.
void set_files(Files* replacement);

}  // namespace meridian::ckpt

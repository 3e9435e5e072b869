// Every file operation of checkpoints, behind one interface (leveldb's Env): the process's
// implementation does them; a test installs one that fails chosen operations (a full disk, an I/O
// error, a short read, a failed rename, removal or fsync) and checks that every rank gets a clear
// error, `latest` stays where it was and no partial file looks valid.
//
// What passes through it: the creation of a checkpoint file and the writes and reads of its
// datasets (on_create, on_write, on_read: the data itself moves through HDF5's MPI-IO driver, and
// these are called around those transfers, inside the Writer's agreed steps and after the Reader's
// reads, so a fault they inject takes the same path as a failure of the transfer); and everything
// else ckpt does to the file system: the checkpoint directory's creation, the file's and the
// directory's fsync, the rename of step_N.h5.tmp into place and of a newer checkpoint to
// .abandoned on resume, the removal of .tmp files and of checkpoints retention drops, the small
// `latest` file's write and read, and the listing of the directory. Nothing in ckpt touches a
// checkpoint file otherwise (`meridian bench ckpt`'s scratch files excepted).
//
// Every method is called by one rank (rank 0 for the directory's operations; each rank for its
// own fsync and its own transfers), never collectively; ckpt agrees failures across ranks itself.
// Calls come from any thread that writes or reads a checkpoint (a background save's included):
// implementations must be thread-safe. Failures are thrown as SystemError, whose text is what the
// OS would say, naming the path.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meridian::ckpt {

class Files {
 public:
  virtual ~Files() = default;

  // --- Around HDF5's transfers (hooks; the real layer does nothing) ---
  // After this rank took part in creating `path` (a new checkpoint file, through MPI-IO); throwing
  // fails the creation.
  virtual void on_create(const std::string& path) {}
  // After this rank wrote its part of `dataset` into `path` (the collective calls done, as when the
  // transfer itself returns an error); throwing fails the write.
  virtual void on_write(const std::string& path, const std::string& dataset) {}
  // After this rank read `data` (raw bytes, possibly part of the dataset) from `path`: throwing fails
  // the read; changing `data` stands for a short or corrupted read (the checksums must catch it).
  virtual void on_read(const std::string& path, const std::string& dataset, at::Tensor& data) {}

  // --- The whole-file checksum (seal.cpp), around HDF5 ---
  // The size of the file `path` in bytes. SystemError "cannot read <path>: <reason>".
  virtual uint64_t size(const std::string& path);
  // Reads `n` bytes at `offset` of `path` into `data`. SystemError naming the path when the file
  // cannot be read or ends before offset + n.
  virtual void read_at(const std::string& path, uint64_t offset, void* data, size_t n);
  // Writes `bytes` at `offset` of `path` (no truncation), then fsyncs it. SystemError naming the path.
  virtual void write_at(const std::string& path, uint64_t offset, const std::string& bytes);

  // --- The file system ---
  // Creates `dir` and its missing parents (nothing when it exists). SystemError "cannot create the
  // checkpoint directory '<dir>': <reason>".
  virtual void create_dir(const std::string& dir);
  // Renames `from` to `to` atomically (replacing `to`). SystemError "cannot rename <from> to <to>:
  // <reason>".
  virtual void rename(const std::string& from, const std::string& to);
  // Removes the file `path`; a missing one is no error. SystemError "cannot remove <path>: <reason>".
  virtual void remove(const std::string& path);
  // fsync of the file `path`: what this node's page cache holds of it reaches the disk (on NFS,
  // this client's writes). SystemError "fsync failed: <reason>".
  virtual void sync_file(const std::string& path);
  // fsync of the directory `dir`: the renames and removals in it are durable. A file system that
  // cannot sync a directory (EINVAL) is no error. SystemError "cannot fsync the directory '<dir>':
  // <reason>".
  virtual void sync_dir(const std::string& dir);
  // Writes a small file (`latest`) so that a reader sees either its old or its whole new contents:
  // <path>.tmp, then a rename over `path` (core's write_file_atomically). SystemError naming the file.
  virtual void write_small(const std::string& path, const std::string& contents);
  // The contents of a small file; nullopt when it does not exist or cannot be read (as a missing
  // `latest`).
  virtual std::optional<std::string> read_small(const std::string& path);
  // Points the symbolic link `path` at `target` (a name relative to the link's directory: best.h5
  // -> step_N.h5) atomically: <path>.tmp, then a rename over `path`. SystemError naming the link.
  virtual void link(const std::string& target, const std::string& path);
  // What the symbolic link `path` points at, as written; nullopt when it is not a link (or missing).
  virtual std::optional<std::string> read_link(const std::string& path);
  // The names (not paths) of the entries of `dir`, in no particular order; empty when `dir` is not
  // a directory. SystemError "cannot list <dir>: <reason>" when it is one but cannot be read.
  virtual std::vector<std::string> list(const std::string& dir);
};

// The process's file layer (the real one unless a test installed another).
Files& files();
// Tests: `replacement` is used until the next call; null restores the real one. Not thread-safe
// against checkpoint I/O in flight: install before a save, not during one.
void set_files(Files* replacement);

}  // namespace meridian::ckpt

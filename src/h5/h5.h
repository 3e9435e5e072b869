// Internal to meridian (data/ and ckpt/ link it; no public header): small RAII layer over HDF5's C API, written by hand
// because the HDF5 C++ API is not built for Debian's parallel (MPI) HDF5. Every call is checked (MERIDIAN_H5_CHECK).
// HDF5 in this build is not thread-safe: one thread at a time may call into it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "h5_check.h"

namespace meridian::h5 {

// HDF5 in this build is not thread-safe: every function that calls HDF5 (or closes an Id)
// holds this process-wide lock, so loaders, readers and writers may live on any threads.
std::unique_lock<std::recursive_mutex> lock();

// Owns an HDF5 identifier and closes it with the matching H5*close.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Id() { reset(); }
  Id(Id&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Id& operator=(Id&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
  }
  // Forgets the id without closing it (closing a parallel file is collective: a rank unwinding
  // alone must not attempt it).
  void release() { id_ = H5I_INVALID_HID; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

Id file_id(hid_t id);
Id dataset_id(hid_t id);
Id space_id(hid_t id);
Id type_id(hid_t id);
Id plist_id(hid_t id);
Id group_id(hid_t id);
Id attr_id(hid_t id);

// Variable-length UTF-8 string type.
Id vlen_string_type();

bool exists(hid_t loc, const std::string& path);  // link exists (intermediate groups too)
std::vector<hsize_t> dims(hid_t dataset);
std::vector<hsize_t> chunk_dims(hid_t dataset);  // empty if contiguous

void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, int64_t value);
std::optional<std::string> read_attr_string(hid_t obj, const std::string& name);
std::optional<int64_t> read_attr_int(hid_t obj, const std::string& name);

// Serial helpers (one process): whole 1-D datasets of strings or bytes.
void write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values);
std::vector<std::string> read_strings(hid_t dataset, hsize_t start, hsize_t count);  // 1-D or flattened 2-D
void write_bytes(hid_t loc, const std::string& name, const std::string& bytes);
std::string read_bytes(hid_t dataset);

// Silences HDF5's automatic error printing for a scope (errors are reported by our checks).
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace meridian::h5

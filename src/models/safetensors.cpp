#include "meridian/models/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/utils.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "meridian/core/error.h"

namespace meridian::models {

// The format is little-endian; tensors are written and read as raw bytes.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace {

using Json = nlohmann::ordered_json;  // keeps the header's order (ties between empty tensors)

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr size_t kMaxListed = 20;

struct DtypeInfo {
  const char* name;
  at::ScalarType type;
  uint64_t size;
};

const DtypeInfo kDtypes[] = {
    {"F64", at::kDouble, 8}, {"F32", at::kFloat, 4}, {"F16", at::kHalf, 2},  {"BF16", at::kBFloat16, 2},
    {"I64", at::kLong, 8},   {"I32", at::kInt, 4},   {"I16", at::kShort, 2}, {"I8", at::kChar, 1},
    {"U8", at::kByte, 1},    {"BOOL", at::kBool, 1},
};

const DtypeInfo* dtype_by_name(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const DtypeInfo* dtype_by_type(at::ScalarType type) {
  for (const auto& d : kDtypes)
    if (type == d.type) return &d;
  return nullptr;
}

std::string supported_dtypes() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

template <typename T>
std::string fmt_list(const std::vector<T>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

std::string fmt_shape(at::IntArrayRef shape) { return fmt_list(shape.vec()); }

std::string tensor_where(const std::string& name) { return "tensor '" + name + "'"; }

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool write_all(int fd, const void* data, uint64_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, 1ull << 30));
    const ssize_t n = ::write(fd, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    bytes -= static_cast<uint64_t>(n);
  }
  return true;
}

// Reads exactly `bytes` at `offset`; SystemError naming `path` on failure or a short file.
void pread_all(const std::string& path, int fd, void* data, uint64_t bytes, uint64_t offset) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, 1ull << 30));
    const ssize_t n = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw SystemError(path + ": read failed at byte " + std::to_string(offset) + ": " + std::strerror(errno));
    }
    if (n == 0)
      throw SystemError(path + ": unexpected end of file at byte " + std::to_string(offset) +
                        " (file changed while being read?)");
    p += n;
    bytes -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

struct Entry {
  std::string name;
  const DtypeInfo* dtype = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;  // sorted by data offset
  uint64_t data_start = 0;     // file offset of the data buffer
};

// A non-negative integer JSON value, else DataError "<field> is negative / not an integer".
uint64_t to_index(const std::string& path, const std::string& where, const std::string& field, const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer())
    throw DataError(path, where, field + " is negative (" + std::to_string(v.get<int64_t>()) + ")");
  throw DataError(path, where, field + " is not a non-negative integer (" + v.dump() + ")");
}

Entry parse_entry(const std::string& path, const std::string& name, const Json& v, uint64_t buffer_bytes) {
  const std::string where = tensor_where(name);
  if (!v.is_object())
    throw DataError(
        path, where,
        "entry is not an object with \"dtype\", \"shape\" and \"data_offsets\" (" + std::string(v.type_name()) + ")");
  Entry e;
  e.name = name;

  const auto dtype = v.find("dtype");
  if (dtype == v.end()) throw DataError(path, where, "'dtype' is missing");
  if (!dtype->is_string()) throw DataError(path, where, "'dtype' is not a string (" + dtype->dump() + ")");
  e.dtype = dtype_by_name(dtype->get<std::string>());
  if (!e.dtype)
    throw DataError(path, where,
                    "unknown dtype '" + dtype->get<std::string>() + "' (supported: " + supported_dtypes() + ")");

  const auto shape = v.find("shape");
  if (shape == v.end()) throw DataError(path, where, "'shape' is missing");
  if (!shape->is_array()) throw DataError(path, where, "'shape' is not an array (" + shape->dump() + ")");
  uint64_t numel = 1;
  for (size_t i = 0; i < shape->size(); ++i) {
    const uint64_t dim = to_index(path, where, "'shape'[" + std::to_string(i) + "]", (*shape)[i]);
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || __builtin_mul_overflow(numel, dim, &numel))
      throw DataError(path, where, "'shape' " + shape->dump() + " is too large");
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(numel, e.dtype->size, &bytes))
    throw DataError(path, where, "'shape' " + shape->dump() + " is too large");

  const auto offsets = v.find("data_offsets");
  if (offsets == v.end()) throw DataError(path, where, "'data_offsets' is missing");
  if (!offsets->is_array() || offsets->size() != 2)
    throw DataError(path, where, "'data_offsets' is not [begin, end] (" + offsets->dump() + ")");
  e.begin = to_index(path, where, "'data_offsets'[0]", (*offsets)[0]);
  e.end = to_index(path, where, "'data_offsets'[1]", (*offsets)[1]);
  const std::string range = "'data_offsets' " + fmt_list(std::vector<uint64_t>{e.begin, e.end});
  if (e.begin > e.end) throw DataError(path, where, range + ": begin is after end");
  if (e.end > buffer_bytes)
    throw DataError(path, where,
                    range + " run past the end of the data buffer (" + std::to_string(buffer_bytes) + " bytes)");
  if (e.end - e.begin != bytes)
    throw DataError(path, where,
                    range + " hold " + std::to_string(e.end - e.begin) + " bytes but shape " + fmt_list(e.shape) +
                        " of " + e.dtype->name + " needs " + std::to_string(bytes));
  return e;
}

// Reads and validates the whole header of the open file `fd` (everything but the tensor bytes).
Header read_header(const std::string& path, int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw SystemError(path + ": cannot stat: " + std::strerror(errno));
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8)
    throw DataError(path, "header",
                    "the file is " + std::to_string(file_bytes) +
                        " bytes, shorter than the 8-byte header length (not a safetensors file?)");
  uint64_t header_bytes = 0;
  pread_all(path, fd, &header_bytes, 8, 0);
  if (header_bytes > kMaxHeaderBytes)
    throw DataError(
        path, "header",
        "header length " + std::to_string(header_bytes) + " bytes is over the 100 MB limit (not a safetensors file?)");
  if (header_bytes > file_bytes - 8)
    throw DataError(path, "header",
                    "header length " + std::to_string(header_bytes) + " bytes runs past the end of the " +
                        std::to_string(file_bytes) + "-byte file (truncated?)");
  std::string text(header_bytes, '\0');
  if (header_bytes > 0) pread_all(path, fd, text.data(), header_bytes, 8);

  // Duplicate top-level keys would silently drop a tensor: reject them while parsing.
  std::set<std::string> keys;
  const Json::parser_callback_t on_event = [&](int depth, nlohmann::json::parse_event_t event, Json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && !keys.insert(parsed.get<std::string>()).second)
      throw DataError(path, "header", "key '" + parsed.get<std::string>() + "' appears twice");
    return true;
  };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    std::string why = e.what();
    if (const auto close = why.find("] "); why.rfind("[json.exception", 0) == 0 && close != std::string::npos)
      why = why.substr(close + 2);
    throw DataError(path, "header", "not valid JSON: " + why);
  }
  if (!json.is_object()) throw DataError(path, "header", std::string("not a JSON object (") + json.type_name() + ")");

  Header h;
  h.data_start = 8 + header_bytes;
  const uint64_t buffer_bytes = file_bytes - h.data_start;
  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__") {
      if (value.is_null()) continue;
      if (!value.is_object())
        throw DataError(path, "__metadata__", std::string("not an object of strings (") + value.type_name() + ")");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          throw DataError(path, "__metadata__", "value of '" + k + "' is not a string (" + v.dump() + ")");
        h.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(path, key, value, buffer_bytes));
  }

  // The tensors must tile the buffer: no overlap, no hole, nothing left at the end (as the
  // reference implementation requires). A stable sort keeps the header's order between ties.
  std::stable_sort(h.entries.begin(), h.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const auto& e : h.entries) {
    const std::string range = "'data_offsets' " + fmt_list(std::vector<uint64_t>{e.begin, e.end});
    if (e.begin < covered)
      throw DataError(path, tensor_where(e.name),
                      range + " overlap tensor '" + previous->name + "' " +
                          fmt_list(std::vector<uint64_t>{previous->begin, previous->end}));
    if (e.begin > covered)
      throw DataError(path, tensor_where(e.name),
                      range + " leave bytes [" + std::to_string(covered) + ", " + std::to_string(e.begin) +
                          ") of the data buffer to no tensor (holes are not allowed)");
    covered = e.end;
    previous = &e;
  }
  if (covered != buffer_bytes)
    throw DataError(path, "data buffer",
                    "bytes [" + std::to_string(covered) + ", " + std::to_string(buffer_bytes) +
                        ") belong to no tensor (the tensors must cover the buffer exactly)");
  return h;
}

Fd open_for_reading(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) throw SystemError(path + ": cannot open: " + std::strerror(errno));
  return f;
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json& m = header["__metadata__"] = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) throw std::invalid_argument("save_safetensors: " + path + ": a tensor has an empty name");
    if (name == "__metadata__")
      throw std::invalid_argument("save_safetensors: " + path + ": '__metadata__' cannot name a tensor");
    if (header.contains(name))
      throw std::invalid_argument("save_safetensors: " + path + ": tensor '" + name + "' given twice");
    if (!t.defined()) throw std::invalid_argument("save_safetensors: " + path + ": tensor '" + name + "' is undefined");
    const DtypeInfo* dtype = dtype_by_type(t.scalar_type());
    if (!dtype)
      throw std::invalid_argument("save_safetensors: " + path + ": tensor '" + name + "' has dtype " +
                                  std::string(c10::toString(t.scalar_type())) + ", not one of " + supported_dtypes());
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype->size;
    header[name] = Json{{"dtype", dtype->name}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("save_safetensors: " + path + ": a name or metadata string is not valid UTF-8 (" +
                                e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the buffer starts 8-byte aligned
  const uint64_t header_bytes = text.size();

  // Written to <path>.tmp, made durable, then renamed: readers never see a partial file.
  const std::string tmp = path + ".tmp";
  struct TmpFile {
    Fd f;
    std::string path;
    bool keep = false;
    ~TmpFile() {
      if (!keep) ::unlink(path.c_str());
    }
  } out;
  out.path = tmp;
  out.f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out.f.fd < 0) {
    out.keep = true;  // not ours to remove
    throw SystemError(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  }
  auto failed = [&](const std::string& what) {
    return SystemError(path + ": " + what + " " + tmp + " failed: " + std::strerror(errno));
  };
  if (!write_all(out.f.fd, &header_bytes, 8) || !write_all(out.f.fd, text.data(), text.size())) throw failed("writing");
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] == 0) continue;
    const at::Tensor cpu = tensors[i].second.detach().to(at::kCPU).contiguous();  // one tensor at a time
    if (!write_all(out.f.fd, cpu.data_ptr(), sizes[i])) throw failed("writing");
  }
  if (::fsync(out.f.fd) != 0) throw failed("flushing");
  const int fd = out.f.fd;
  out.f.fd = -1;
  if (::close(fd) != 0) throw failed("closing");
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw SystemError(path + ": renaming " + tmp + " into place failed: " + std::strerror(errno));
  out.keep = true;
}

namespace {
// Entry `e` of the file open as `fd`, whose buffer starts at `data_start`.
at::Tensor read_entry(const std::string& path, int fd, uint64_t data_start, const Entry& e) {
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype->type));
  const uint64_t bytes = e.end - e.begin;
  if (bytes > 0) pread_all(path, fd, t.data_ptr(), bytes, data_start + e.begin);
  if (e.dtype->type == at::kBool && bytes > 0) {
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    for (uint64_t i = 0; i < bytes; ++i)
      if (p[i] > 1)
        throw DataError(path, tensor_where(e.name),
                        "BOOL element " + std::to_string(i) + " is byte " + std::to_string(p[i]) + ", not 0 or 1");
  }
  return t;
}
}  // namespace

NamedTensors load_safetensors(const std::string& path) {
  const Fd f = open_for_reading(path);
  const Header h = read_header(path, f.fd);
  NamedTensors out;
  out.reserve(h.entries.size());
  for (const auto& e : h.entries) out.emplace_back(e.name, read_entry(path, f.fd, h.data_start, e));
  return out;
}

LazyTensors open_safetensors(const std::string& path) {
  const Fd f = open_for_reading(path);
  const Header h = read_header(path, f.fd);
  LazyTensors out;
  out.reserve(h.entries.size());
  for (const auto& e : h.entries)
    out.push_back({e.name, e.shape, e.dtype->type, [path, e, start = h.data_start] {
                     const Fd g = open_for_reading(path);
                     return read_entry(path, g.fd, start, e);
                   }});
  return out;
}

std::map<std::string, std::string> safetensors_metadata(const std::string& path) {
  const Fd f = open_for_reading(path);
  return read_header(path, f.fd).metadata;
}

void load_into(torch::nn::Module& module, const NamedTensors& tensors,
               const std::function<std::string(const std::string&)>& map_name, const std::string& source) {
  LazyTensors lazy;
  lazy.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw std::invalid_argument("load_into: " + source + ": tensor '" + name + "' is undefined");
    lazy.push_back({name, t.sizes().vec(), t.scalar_type(), [t = t] { return t; }});
  }
  load_into(module, lazy, map_name, source);
}

void load_into(torch::nn::Module& module, const LazyTensors& tensors,
               const std::function<std::string(const std::string&)>& map_name, const std::string& source) {
  const auto matched = match_tensors(module, tensors, map_name, source);
  std::map<std::string, at::Tensor> targets;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) targets.emplace(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) targets.emplace(b.key(), b.value());
  // One file tensor in memory at a time, converted into its target.
  torch::NoGradGuard no_grad;
  for (const auto& [name, lazy] : matched) targets.at(name).copy_(lazy->read());
}

std::map<std::string, const LazyTensor*> match_tensors(torch::nn::Module& module, const LazyTensors& tensors,
                                                       const std::function<std::string(const std::string&)>& map_name,
                                                       const std::string& source) {
  std::vector<std::string> order;  // the module's names, registration order
  std::map<std::string, at::Tensor> targets;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    if (p.value().defined() && targets.emplace(p.key(), p.value()).second) order.push_back(p.key());
  for (const auto& b : module.named_buffers(/*recurse=*/true))
    if (b.value().defined() && targets.emplace(b.key(), b.value()).second) order.push_back(b.key());

  std::map<std::string, std::string> provided;  // module name -> file name
  std::map<std::string, const LazyTensor*> matched;
  std::vector<std::string> unused, twice, mismatched, missing;
  for (const auto& t : tensors) {
    const std::string& name = t.name;
    const std::string mapped = map_name ? map_name(name) : name;
    if (mapped.empty()) continue;
    const std::string shown = mapped == name ? name : name + " (as " + mapped + ")";
    const auto target = targets.find(mapped);
    if (target == targets.end()) {
      unused.push_back(shown);
      continue;
    }
    const auto [first, fresh] = provided.emplace(mapped, name);
    if (!fresh) {
      twice.push_back(first->second + " and " + name + " -> " + mapped);
      continue;
    }
    if (at::IntArrayRef(t.shape) != target->second.sizes()) {
      mismatched.push_back(shown + ": file " + fmt_shape(t.shape) + " vs model " + fmt_shape(target->second.sizes()));
      continue;
    }
    matched.emplace(mapped, &t);
  }
  for (const auto& name : order)
    if (!provided.count(name)) missing.push_back(name);

  std::string problem;
  const auto add = [&](const std::string& title, const std::vector<std::string>& names) {
    if (names.empty()) return;
    problem += (problem.empty() ? "" : "; ") + title + " (" + std::to_string(names.size()) + "): ";
    for (size_t i = 0; i < names.size() && i < kMaxListed; ++i) problem += (i ? ", " : "") + names[i];
    if (names.size() > kMaxListed) problem += ", ... and " + std::to_string(names.size() - kMaxListed) + " more";
  };
  add("missing from the file", missing);
  add("not used by the model", unused);
  add("mapped to the same name twice", twice);
  add("shape mismatch", mismatched);
  if (!problem.empty()) throw DataError(source, "load_into", problem);
  return matched;
}

}  // namespace meridian::models

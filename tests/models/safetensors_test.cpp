// safetensors files: round trips (bit-exact), the bytes on disk, every malformed-file rejection,
// and load_into (success, one message for missing / unused / mismatched names, name mapping).
#include "meridian/models/safetensors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meridian/core/error.h"

namespace meridian::models {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("meridian_safetensors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read_bytes(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void write_bytes(const std::string& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good());
  }
  static std::string le64(uint64_t v) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    return s;
  }
  // A safetensors file by hand: length prefix (the header's own unless given), header, buffer.
  std::string raw(const std::string& name, const std::string& header, const std::string& buffer, int64_t length = -1) {
    const std::string p = path(name);
    write_bytes(p, le64(length < 0 ? header.size() : static_cast<uint64_t>(length)) + header + buffer);
    return p;
  }

  // `fn` throws DataError whose message names the file and contains every piece of `expected`.
  template <typename Fn>
  static void expect_data_error(const std::string& file, Fn fn, const std::vector<std::string>& expected) {
    try {
      fn();
      ADD_FAILURE() << file << ": no DataError, expected one containing '" << expected.front() << "'";
    } catch (const DataError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(file + ": ", 0), 0u) << what;
      for (const auto& piece : expected)
        EXPECT_NE(what.find(piece), std::string::npos) << "'" << piece << "' not in: " << what;
    }
  }
  static void expect_bad_file(const std::string& file, const std::vector<std::string>& expected) {
    expect_data_error(
        file, [&] { load_safetensors(file); }, expected);
  }

  static bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
    if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
    const at::Tensor ca = a.contiguous(), cb = b.contiguous();
    return ca.numel() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripIsBitExactForEveryDtypeInTheGivenOrder) {
  at::manual_seed(1);
  at::Tensor nan_payload = at::randn({4});
  const uint32_t bits = 0x7fc00123u;  // a NaN with a payload must survive untouched
  std::memcpy(nan_payload.data_ptr(), &bits, 4);
  const NamedTensors tensors = {
      {"zeta.f32", at::randn({3, 4})},
      {"alpha.bf16", at::randn({5, 2}).to(at::kBFloat16)},
      {"f16", at::randn({7}).to(at::kHalf)},
      {"f64", at::randn({2, 2, 2}, at::kDouble)},
      {"i64", at::randint(-(1ll << 40), 1ll << 40, {6}, at::kLong)},
      {"i32", at::randint(-1000, 1000, {3}, at::kInt)},
      {"i16", at::randint(-300, 300, {3}, at::kShort)},
      {"i8", at::randint(-128, 127, {4}, at::kChar)},
      {"u8", at::randint(0, 255, {2, 5}, at::kByte)},
      {"bool", at::randint(0, 2, {5}).to(at::kBool)},
      {"scalar", at::scalar_tensor(3.25, at::kDouble)},
      {"empty", at::empty({0, 3})},
      {"transposed", at::randn({3, 5}).t()},  // not contiguous: saved as its row-major copy
      {"nan", nan_payload},
  };
  const std::string p = path("w.safetensors");
  save_safetensors(p, tensors);
  EXPECT_FALSE(fs::exists(p + ".tmp"));

  const NamedTensors loaded = load_safetensors(p);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].first);
    EXPECT_EQ(loaded[i].first, tensors[i].first);
    EXPECT_TRUE(same_bytes(loaded[i].second, tensors[i].second));
    EXPECT_TRUE(loaded[i].second.is_contiguous());
  }
  EXPECT_EQ(loaded[10].second.dim(), 0);
  EXPECT_EQ(loaded[11].second.sizes(), at::IntArrayRef({0, 3}));
  EXPECT_TRUE(safetensors_metadata(p).empty());

  // Saving again over an existing file replaces it.
  save_safetensors(p, {{"only", at::ones({2})}});
  const NamedTensors again = load_safetensors(p);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].first, "only");
}

TEST_F(SafetensorsTest, MetadataRoundTrip) {
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode, \"quoted\"\n"}};
  const std::string p = path("m.safetensors");
  save_safetensors(p, {{"x", at::arange(6).reshape({2, 3})}}, metadata);
  EXPECT_EQ(safetensors_metadata(p), metadata);
  const NamedTensors loaded = load_safetensors(p);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].first, "x");

  // Metadata and no tensors at all is a valid file too.
  save_safetensors(p, {}, {{"k", "v"}});
  EXPECT_TRUE(load_safetensors(p).empty());
  EXPECT_EQ(safetensors_metadata(p).at("k"), "v");
}

TEST_F(SafetensorsTest, FileBytesFollowTheFormat) {
  const std::string p = path("tiny.safetensors");
  save_safetensors(p, {{"w", at::tensor({1.5f, -2.0f})}, {"b", at::tensor({int16_t{1}}, at::kShort)}});
  const std::string bytes = read_bytes(p);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  ASSERT_EQ(bytes.size(), 8 + n + 8 + 2);
  const std::string header = bytes.substr(8, n);
  const auto json = nlohmann::json::parse(header);  // trailing spaces are JSON whitespace
  EXPECT_FALSE(json.contains("__metadata__"));
  EXPECT_EQ(json.size(), 2u);
  EXPECT_EQ(json["w"]["dtype"], "F32");
  EXPECT_EQ(json["w"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(json["w"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(json["b"]["dtype"], "I16");
  EXPECT_EQ(json["b"]["data_offsets"], nlohmann::json::array({8, 10}));
  EXPECT_EQ(header.front(), '{');
  const size_t close = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "only trailing spaces pad the header";
  // 1.5f = 0x3FC00000, -2.0f = 0xC0000000, little-endian; then int16 1.
  const std::string expected("\x00\x00\xc0\x3f\x00\x00\x00\xc0\x01\x00", 10);
  EXPECT_EQ(bytes.substr(8 + n), expected);
}

TEST_F(SafetensorsTest, ReadsAHandWrittenFileWithPaddedHeader) {
  std::string header = R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},)"
                       R"("a":{"dtype":"BF16","shape":[],"data_offsets":[4,6]}})";
  header.append((8 - header.size() % 8) % 8 + 8, ' ');
  const std::string p = raw("hand.safetensors", header, std::string("\x01\x00\xff\xff\x80\x3f", 6));
  const NamedTensors t = load_safetensors(p);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].first, "b");
  EXPECT_EQ(t[0].second.scalar_type(), at::kShort);
  EXPECT_EQ(t[0].second[0].item<int16_t>(), 1);
  EXPECT_EQ(t[0].second[1].item<int16_t>(), -1);
  EXPECT_EQ(t[1].first, "a");
  EXPECT_EQ(t[1].second.dim(), 0);
  EXPECT_EQ(t[1].second.item<float>(), 1.0f);  // bf16 0x3F80
  EXPECT_EQ(safetensors_metadata(p).at("format"), "pt");
}

TEST_F(SafetensorsTest, MalformedFilesAreRejectedWithFileAndProblem) {
  const std::string f32x2 = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  const std::string eight(8, '\0');

  // File and header length.
  {
    const std::string p = path("short.safetensors");
    write_bytes(p, std::string("\x05\x00\x00", 3));
    expect_bad_file(p, {"header", "the file is 3 bytes, shorter than the 8-byte header length"});
  }
  expect_bad_file(raw("len_past_end.safetensors", "{}", "", 1000), {"header length 1000", "runs past the end"});
  expect_bad_file(raw("len_absurd.safetensors", "{}", std::string(16, ' '), 200ll << 20), {"over the 100 MB limit"});

  // Header JSON.
  expect_bad_file(raw("not_json.safetensors", "{not json", ""), {"header", "not valid JSON"});
  expect_bad_file(raw("empty_header.safetensors", "", ""), {"header", "not valid JSON"});
  expect_bad_file(raw("bad_utf8.safetensors", "{\"\xff\":1}", ""), {"not valid JSON"});
  expect_bad_file(raw("array.safetensors", "[1,2]", ""), {"header", "not a JSON object (array)"});
  expect_bad_file(raw("duplicate.safetensors", "{\"x\":{" + f32x2 + "},\"x\":{" + f32x2 + "}}", eight),
                  {"key 'x' appears twice"});
  expect_bad_file(raw("meta.safetensors", R"({"__metadata__":{"k":1}})", ""), {"__metadata__", "'k' is not a string"});
  expect_bad_file(raw("meta_array.safetensors", R"({"__metadata__":[]})", ""), {"__metadata__", "not an object"});

  // Entries.
  expect_bad_file(raw("entry.safetensors", R"({"x":[1]})", ""), {"tensor 'x'", "entry is not an object"});
  expect_bad_file(raw("no_dtype.safetensors", R"({"x":{"shape":[2],"data_offsets":[0,8]}})", eight),
                  {"tensor 'x'", "'dtype' is missing"});
  expect_bad_file(raw("no_shape.safetensors", R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", eight),
                  {"tensor 'x'", "'shape' is missing"});
  expect_bad_file(raw("no_offsets.safetensors", R"({"x":{"dtype":"F32","shape":[2]}})", eight),
                  {"tensor 'x'", "'data_offsets' is missing"});
  expect_bad_file(raw("dtype_type.safetensors", R"({"x":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", eight),
                  {"tensor 'x'", "'dtype' is not a string"});
  expect_bad_file(raw("dtype.safetensors", R"({"x":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", eight),
                  {"tensor 'x'", "unknown dtype 'Q4'", "supported: F64"});
  expect_bad_file(raw("shape_type.safetensors", R"({"x":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", eight),
                  {"tensor 'x'", "'shape' is not an array"});
  expect_bad_file(raw("shape_neg.safetensors", R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
                  {"tensor 'x'", "'shape'[0] is negative (-2)"});
  expect_bad_file(
      raw("shape_float.safetensors", R"({"x":{"dtype":"F32","shape":[1,2.5],"data_offsets":[0,8]}})", eight),
      {"tensor 'x'", "'shape'[1] is not a non-negative integer (2.5)"});
  expect_bad_file(raw("shape_huge.safetensors",
                      R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight),
                  {"tensor 'x'", "too large"});
  expect_bad_file(raw("offsets_one.safetensors", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", eight),
                  {"tensor 'x'", "'data_offsets' is not [begin, end]"});
  expect_bad_file(raw("offsets_neg.safetensors", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", eight),
                  {"tensor 'x'", "'data_offsets'[0] is negative"});
  expect_bad_file(raw("offsets_order.safetensors", R"({"x":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight),
                  {"tensor 'x'", "[8, 0]: begin is after end"});
  expect_bad_file(raw("past_end.safetensors", R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight),
                  {"tensor 'x'", "[0, 16] run past the end of the data buffer (8 bytes)"});
  expect_bad_file(raw("size.safetensors", R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
                  {"tensor 'x'", "hold 8 bytes but shape [3] of F32 needs 12"});

  // Ranges: overlap, holes, uncovered tail.
  const std::string twelve(12, '\0');
  expect_bad_file(raw("overlap.safetensors",
                      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      twelve),
                  {"tensor 'b'", "[4, 12] overlap tensor 'a' [0, 8]"});
  expect_bad_file(raw("hole.safetensors",
                      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                      twelve),
                  {"tensor 'b'", "leave bytes [4, 8)", "holes are not allowed"});
  expect_bad_file(raw("tail.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
                  {"data buffer", "bytes [4, 8) belong to no tensor"});
  expect_bad_file(raw("no_tensors.safetensors", "{}", eight), {"data buffer", "bytes [0, 8) belong to no tensor"});

  // Values.
  expect_bad_file(raw("bool.safetensors", R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                      std::string("\x01\x00\x02", 3)),
                  {"tensor 'm'", "BOOL element 2 is byte 2"});

  // The metadata reader validates the same header.
  const std::string p = raw("meta_check.safetensors",
                            R"({"__metadata__":{},"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight);
  expect_data_error(p, [&] { safetensors_metadata(p); }, {"needs 12"});
}

TEST_F(SafetensorsTest, IoFailuresAndBadArguments) {
  EXPECT_THROW(load_safetensors(path("missing.safetensors")), SystemError);
  const std::string in_missing_dir = path("no/such/dir/w.safetensors");
  try {
    save_safetensors(in_missing_dir, {{"x", at::ones({1})}});
    ADD_FAILURE() << "no SystemError";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(in_missing_dir), std::string::npos) << e.what();
  }
  const std::string p = path("args.safetensors");
  EXPECT_THROW(save_safetensors(p, {{"x", at::ones({1})}, {"x", at::ones({1})}}), std::invalid_argument);
  EXPECT_THROW(save_safetensors(p, {{"__metadata__", at::ones({1})}}), std::invalid_argument);
  EXPECT_THROW(save_safetensors(p, {{"", at::ones({1})}}), std::invalid_argument);
  EXPECT_THROW(save_safetensors(p, {{"x", at::Tensor()}}), std::invalid_argument);
  EXPECT_THROW(save_safetensors(p, {{"c", at::ones({1}, at::kComplexFloat)}}), std::invalid_argument);
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

torch::nn::Sequential small_model() { return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::Linear(3, 2)); }

NamedTensors tensors_of(torch::nn::Module& m) {
  NamedTensors out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value().detach().clone());
  for (const auto& b : m.named_buffers()) out.emplace_back(b.key(), b.value().detach().clone());
  return out;
}

TEST_F(SafetensorsTest, LoadIntoCopiesByNameAndConvertsDtype) {
  at::manual_seed(2);
  auto source = small_model();
  NamedTensors saved = tensors_of(*source);
  saved[0].second = saved[0].second.to(at::kDouble);  // converted back to float32 on load
  const std::string p = path("model.safetensors");
  save_safetensors(p, saved);

  auto target = small_model();
  load_into(*target, load_safetensors(p), nullptr, p);
  for (const auto& item : source->named_parameters()) {
    const std::string& name = item.key();
    const at::Tensor& value = item.value();
    SCOPED_TRACE(name);
    const at::Tensor got = target->named_parameters()[name];
    EXPECT_EQ(got.scalar_type(), at::kFloat);
    EXPECT_TRUE(got.requires_grad());
    EXPECT_TRUE(at::equal(got, value));
  }

  // Buffers too (BatchNorm running statistics, int64 counter).
  auto bn_source = torch::nn::Sequential(torch::nn::Linear(2, 3), torch::nn::BatchNorm1d(3));
  bn_source->train();
  bn_source->forward(at::randn({8, 2}));
  auto bn_target = torch::nn::Sequential(torch::nn::Linear(2, 3), torch::nn::BatchNorm1d(3));
  save_safetensors(p, tensors_of(*bn_source));
  load_into(*bn_target, load_safetensors(p), nullptr, p);
  for (const auto& item : bn_source->named_buffers()) {
    SCOPED_TRACE(item.key());
    EXPECT_TRUE(at::equal(bn_target->named_buffers()[item.key()], item.value()));
  }
}

TEST_F(SafetensorsTest, LoadIntoReportsMissingUnusedAndMismatchedInOneMessage) {
  auto model = small_model();
  const at::Tensor before = model->named_parameters()["1.weight"].detach().clone();
  NamedTensors tensors = tensors_of(*model);
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(), [](const auto& t) { return t.first == "1.bias"; }),
                tensors.end());
  tensors.emplace_back("extra.weight", at::ones({2}));
  for (auto& [name, t] : tensors)
    if (name == "0.weight")
      t = at::zeros({3, 5});
    else if (name == "1.weight")
      t = at::full({2, 3}, 7.0);

  const std::string source = "ckpt.safetensors";
  try {
    load_into(*model, tensors, nullptr, source);
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(source + ": load_into: ", 0), 0u) << what;
    EXPECT_NE(what.find("missing from the file (1): 1.bias"), std::string::npos) << what;
    EXPECT_NE(what.find("not used by the model (1): extra.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("shape mismatch (1): 0.weight: file [3, 5] vs model [3, 4]"), std::string::npos) << what;
  }
  // Nothing was copied: the valid 1.weight is still the old value.
  EXPECT_TRUE(at::equal(model->named_parameters()["1.weight"], before));
}

TEST_F(SafetensorsTest, LoadIntoAppliesTheNameMapping) {
  at::manual_seed(3);
  auto source = small_model();
  // File names in another layout: "layers.<i>.<param>", plus a tensor the model does not keep.
  NamedTensors file;
  for (const auto& [name, t] : tensors_of(*source)) file.emplace_back("layers." + name, t);
  file.emplace_back("rotary.inv_freq", at::ones({4}));
  const auto map = [](const std::string& name) -> std::string {
    if (name.rfind("rotary.", 0) == 0) return "";  // dropped
    return name.rfind("layers.", 0) == 0 ? name.substr(7) : name;
  };
  auto target = small_model();
  load_into(*target, file, map);
  for (const auto& item : source->named_parameters())
    EXPECT_TRUE(at::equal(target->named_parameters()[item.key()], item.value())) << item.key();

  // Without the mapping nothing matches; with a mapping that sends two tensors to one name, say so.
  try {
    load_into(*target, file);
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("missing from the file (4)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not used by the model (5): layers.0.weight"), std::string::npos) << e.what();
  }
  file.emplace_back("0.weight", at::zeros({3, 4}));
  try {
    load_into(*target, file, map);
    ADD_FAILURE() << "no DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("mapped to the same name twice (1): layers.0.weight and 0.weight -> 0.weight"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace meridian::models

// The safetensors reader: round trip through the writer, dtype conversion, and a clear error (never a
// crash) for every kind of malformed file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "formats/safetensors.h"

#include <nlohmann/json.hpp>
#include "formats/weights.h"
#include "models/gpt2.h"
#include "foundation/rng.h"
#include "test_helpers.h"

namespace ferry::formats {
namespace {

std::vector<std::byte> file_bytes(const std::string& header, size_t data_bytes) {
  std::vector<std::byte> b(8 + header.size() + data_bytes);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

std::string parse_error(const std::string& header, size_t data_bytes) {
  try {
    SafetensorsFile::parse(file_bytes(header, data_bytes), "bad.safetensors");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripsThroughTheWriter) {
  const auto path = std::filesystem::temp_directory_path() / "ferry_roundtrip.safetensors";
  std::vector<float> a{1, 2, 3, 4, 5, 6}, b{-0.5f};
  write_safetensors(path, {{"a", {2, 3}, a.data()}, {"b.bias", {1}, b.data()}}, {{"note", "hi"}});
  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.read_f32("a"), a);
  EXPECT_EQ(f.read_f32("b.bias"), b);
  EXPECT_EQ(f.find("a")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.metadata().at("note"), "hi");
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  std::filesystem::remove(path);
}

TEST(Safetensors, ConvertsHalfPrecisionAndIntegers) {
  // bf16 1.5 = 0x3FC0, fp16 -2.0 = 0xC000, fp16 smallest subnormal 0x0001 = 2^-24
  std::string h = R"({"b":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},)"
                  R"("h":{"dtype":"F16","shape":[2],"data_offsets":[2,6]},)"
                  R"("i":{"dtype":"I64","shape":[2],"data_offsets":[8,24]}})";
  auto bytes = file_bytes(h, 24);
  const size_t d = 8 + h.size();
  const uint16_t halfs[3] = {0x3FC0, 0xC000, 0x0001};
  std::memcpy(bytes.data() + d, halfs, 6);
  const int64_t ints[2] = {7, -3};
  std::memcpy(bytes.data() + d + 8, ints, 16);
  const auto f = SafetensorsFile::parse(bytes, "mem");
  EXPECT_EQ(f.read_f32("b")[0], 1.5f);
  EXPECT_EQ(f.read_f32("h")[0], -2.0f);
  EXPECT_EQ(f.read_f32("h")[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(f.read_i32("i"), (std::vector<int32_t>{7, -3}));
  EXPECT_THROW(f.read_i32("b"), std::runtime_error);
}

TEST(Safetensors, MalformedFilesAreClearErrors) {
  EXPECT_NE(parse_error("", 0).find("not a valid safetensors"), std::string::npos);
  {
    auto b = file_bytes("{}", 0);
    b[0] = std::byte{0xff};  // header length far beyond the file
    try {
      SafetensorsFile::parse(b, "x");
      FAIL();
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("exceeds the file"), std::string::npos) << e.what();
    }
  }
  EXPECT_NE(parse_error("{not json", 0).find("not a JSON object"), std::string::npos);
  EXPECT_NE(parse_error("[1,2]", 0).find("not a JSON object"), std::string::npos);
  EXPECT_NE(parse_error(R"({"w":{"dtype":"F32","shape":[2]}})", 8).find("needs dtype, shape and data_offsets"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8).find("unknown dtype Q4"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8).find("negative"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8).find("outside the data"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 16).find("need 12"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 16).find("overlap"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"w":{"dtype":"F32","shape":[4000000000,4000000000,4000000000],"data_offsets":[0,8]}})", 8)
                .find("overflows"),
            std::string::npos);
  EXPECT_THROW(SafetensorsFile::open("/nonexistent/file.safetensors"), std::runtime_error);
}

// Each check at its edge, where an off-by-one would let a file read past its end: a header one byte longer
// than the file, a tensor one byte past the data, a range one byte longer than its shape, tensors that share
// one byte; two tensors that only touch are a valid file.
TEST(Safetensors, EachCheckHoldsAtItsEdge) {
  auto b = file_bytes("{}", 0);
  b.pop_back();  // the header says 2 bytes, the file holds 1
  try {
    SafetensorsFile::parse(b, "x");
    ADD_FAILURE() << "a header past the end of the file was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the file"), std::string::npos) << e.what();
  }
  EXPECT_NE(parse_error(R"({"w":{"dtype":"U8","shape":[9],"data_offsets":[0,9]}})", 8).find("outside the data"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,9]}})", 16).find("need 8"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("v":{"dtype":"F32","shape":[2],"data_offsets":[7,15]}})",
                        16)
                .find("overlap"),
            std::string::npos);
  EXPECT_EQ(parse_error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("v":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                        16),
            "");
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  // Flip random bytes of a valid file: parsing either succeeds or throws runtime_error.
  const auto good = testing::data_path("gpt2_tiny.safetensors");
  std::ifstream in(good, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Rng rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::byte> b(reinterpret_cast<std::byte*>(raw.data()), reinterpret_cast<std::byte*>(raw.data()) + raw.size());
    const size_t header_end = 8 + 2000;  // corrupt the length and the JSON header mostly
    for (int k = 0; k < 3; ++k) b[rng.below(header_end)] = static_cast<std::byte>(rng.below(256));
    if (trial % 10 == 0) b.resize(rng.below(b.size()));
    try {
      SafetensorsFile::parse(std::move(b), "corrupt");
    } catch (const std::runtime_error&) {
    }
  }
}

TEST(Weights, MissingExtraAndMisshapenTensorsAreNamed) {
  const models::ModelSpec spec = models::build_gpt2({1, 2, 8, 16, 4}, 1, 4);
  models::ParameterStore store(spec.params);
  const auto path = std::filesystem::temp_directory_path() / "ferry_weights.safetensors";
  std::vector<std::vector<float>> data;
  std::vector<SafetensorsTensorRef> refs;
  for (const auto& p : spec.params) {
    data.emplace_back(models::numel(p.shape), 0.25f);
  }
  for (size_t i = 0; i < spec.params.size(); ++i)
    refs.push_back({spec.params[i].name, spec.params[i].file_shape(), data[i].data()});

  write_safetensors(path, refs);
  load_weights(SafetensorsFile::open(path), spec, store);
  EXPECT_EQ(store.value(spec.param_index("transformer.h.0.mlp.c_fc.bias"))[3], 0.25f);

  auto expect_error = [&](std::vector<SafetensorsTensorRef> r, const std::string& needle) {
    write_safetensors(path, r);
    try {
      load_weights(SafetensorsFile::open(path), spec, store);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto missing = refs;
  missing.erase(missing.begin() + 3);
  expect_error(missing, "'" + spec.params[3].name + "' is missing");
  auto extra = refs;
  extra.push_back({"transformer.h.9.ln_1.weight", {8}, data[0].data()});
  expect_error(extra, "'transformer.h.9.ln_1.weight', which this model does not have");
  auto misshapen = refs;
  misshapen[0].shape = {8, 16};
  expect_error(misshapen, "has shape [8, 16] in the checkpoint; the model needs [16, 8]");
  std::filesystem::remove(path);
}

TEST(Weights, ShardedCheckpointsLoadThroughTheirIndex) {
  const models::ModelSpec spec = models::build_gpt2({1, 2, 8, 16, 4}, 1, 4);
  const auto dir = std::filesystem::temp_directory_path() / "ferry_sharded";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < spec.params.size(); ++i) data.emplace_back(models::numel(spec.params[i].shape), float(i));
  std::vector<SafetensorsTensorRef> a, b;
  nlohmann::json map;
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const bool first = i % 2 == 0;
    (first ? a : b).push_back({spec.params[i].name, spec.params[i].file_shape(), data[i].data()});
    map[spec.params[i].name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir / "model-00001-of-00002.safetensors", a);
  write_safetensors(dir / "model-00002-of-00002.safetensors", b);
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"metadata", {}}, {"weight_map", map}}.dump();
  models::ParameterStore store(spec.params);
  load_weights(dir, spec, store);
  for (int i = 0; i < store.count(); ++i) EXPECT_EQ(store.value(i)[0], float(i)) << spec.params[i].name;
  // A shard that lacks what the index promised: the missing tensor is named.
  write_safetensors(dir / "model-00002-of-00002.safetensors", {b.begin(), b.end() - 1});
  try {
    load_weights(dir, spec, store);
    ADD_FAILURE();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + b.back().name + "' is missing"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ferry::engine

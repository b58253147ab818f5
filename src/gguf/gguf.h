// GGUF v2/v3 reader and writer.
//
// Reader contract: GgufFile::Open mmaps the file (no copy of tensor data); Parse() works on a
// caller-owned byte span (used by the fuzzer and tests). Every count, length, offset, dimension and
// type read from the file is validated against the file size with overflow-checked arithmetic
// before use; on any problem the result is an InvalidArgument status whose message names the field
// (e.g. "tensor 'blk.0.attn_q.weight': data [offset 4096, 1048576 bytes] runs past end of file").
// No allocation is larger than the input size. Duplicate keys / tensor names, wrong value types,
// bad alignment, unknown tensor types and absurd counts are errors.
// Thread-safety: a GgufFile is immutable after loading and safe to share across threads.
//
// Writer contract: GgufWriter accumulates metadata and tensors in memory and writes a
// spec-conformant GGUF v3 file (little-endian, alignment from `general.alignment`, default 32).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/dtype.h"

namespace strata::gguf {

enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view ValueTypeName(ValueType t);

// A metadata value. Scalars keep their exact GGUF type; arrays keep their element type.
// Integer scalars/arrays are stored widened (int64/uint64), floats as double, so callers use the
// typed getters below rather than the storage.
struct Value {
  ValueType type = ValueType::kUint8;
  ValueType elem_type = ValueType::kUint8;  // for arrays
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<uint64_t>,
               std::vector<int64_t>, std::vector<double>, std::vector<uint8_t> /* bools */,
               std::vector<std::string>>
      data;

  static Value Uint(ValueType t, uint64_t v);  // t: kUint8/16/32/64
  static Value Int(ValueType t, int64_t v);    // t: kInt8/16/32/64
  static Value Float32(float v);
  static Value Float64(double v);
  static Value Bool(bool v);
  static Value String(std::string v);
  static Value StringArray(std::vector<std::string> v);
  static Value Float32Array(std::vector<float> v);
  static Value Int32Array(std::vector<int32_t> v);
  static Value UintArray(ValueType elem, std::vector<uint64_t> v);
  static Value IntArray(ValueType elem, std::vector<int64_t> v);
  static Value BoolArray(const std::vector<bool>& v);
  static Value EmptyArray(ValueType elem);

  bool is_array() const { return type == ValueType::kArray; }
  size_t array_size() const;                                // 0 for scalars
  std::string ToDisplayString(size_t max_items = 8) const;  // for `strata info`
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  // ggml order: shape[0] is the fastest-varying dimension (row length); 1..4 dims.
  std::vector<uint64_t> shape;
  DType type = DType::kF32;
  uint64_t offset = 0;  // relative to the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // points into the mapped file / parsed span
};

struct ReadOptions {
  // Limits against hostile files (each also bounded by the file size).
  uint64_t max_string_bytes = uint64_t{1} << 24;
  uint64_t max_array_elems = uint64_t{1} << 26;
  uint64_t max_tensors = uint64_t{1} << 20;
  uint64_t max_kv = uint64_t{1} << 20;
};

class GgufFile {
 public:
  // Maps and parses `path`. Errors name the path and the offending field.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path,
                                                const ReadOptions& opts = {});
  // Parses bytes owned by the caller; they must outlive the returned object.
  static Result<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes,
                                                 const ReadOptions& opts = {});

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  uint64_t file_size() const { return bytes_.size(); }
  std::span<const uint8_t> bytes() const { return bytes_; }  // the whole file (mapped)
  const std::string& path() const { return path_; }

  const std::vector<KeyValue>& metadata() const { return kv_; }
  const Value* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters: NotFound if absent, InvalidArgument naming key and types if the type is wrong.
  // Integer getters accept any integer type whose value fits; GetFloat accepts f32/f64 (and ints).
  Result<std::string> GetString(std::string_view key) const;
  Result<uint64_t> GetUint(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::span<const std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<double>> GetFloatArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  // *Or variants: default when absent, error only when present with a wrong type.
  Result<uint64_t> GetUintOr(std::string_view key, uint64_t def) const;
  Result<double> GetFloatOr(std::string_view key, double def) const;
  Result<bool> GetBoolOr(std::string_view key, bool def) const;
  Result<std::string> GetStringOr(std::string_view key, std::string def) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // Drops the resident pages of [p, p + n) of the mapped file (MappedFile::ReleasePages); no-op
  // for a file parsed from a caller's span.
  void ReleasePages(const void* p, size_t n) const;
  const TensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  friend class GgufParser;
  std::unique_ptr<MappedFile> file_;  // null when parsed from a caller span
  std::span<const uint8_t> bytes_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kv_;
  std::vector<TensorInfo> tensors_;
  // Lookup indexes (implementation detail).
  std::vector<size_t> kv_sorted_;
  std::vector<size_t> tensor_sorted_;
};

class GgufWriter {
 public:
  GgufWriter() = default;
  // Sets (or replaces) a metadata key. Order of first insertion is kept in the file.
  void Set(std::string key, Value value);
  // Adds a tensor; `data` must hold exactly RowBytes(type, shape[0]) * prod(shape[1..]) bytes.
  Status AddTensor(std::string name, DType type, std::vector<uint64_t> shape,
                   std::vector<uint8_t> data);
  // Writes a GGUF v3 file (to a temp name, then renamed).
  Status WriteFile(const std::string& path) const;
  // Serializes to memory (tests, fuzz seeds).
  Result<std::vector<uint8_t>> WriteToBuffer() const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<KeyValue> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace strata::gguf

// GGUF reader. Everything read from the file is untrusted: each count, length, offset and type is
// validated before it is used to index memory or to size an allocation, and every error names the
// field it is about (header.*, metadata 'key', tensor 'name').
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>

#include "base/checked.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

namespace strata::gguf {

namespace {

// Smallest possible on-disk sizes, used to bound counts by the bytes that remain.
// kv: key length (8) + type (4) + the smallest value (1).
constexpr uint64_t kMinKvBytes = 13;
// tensor info: name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
constexpr uint64_t kMinTensorInfoBytes = 32;

std::string Quoted(std::string_view s) {
  // Names in messages: cap the length and replace bytes that would garble a terminal.
  std::string out = "'";
  size_t n = std::min<size_t>(s.size(), 96);
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  if (s.size() > n) out += "...";
  out += "'";
  return out;
}

// Refuses a repeated name among `items` ("<noun>'<name>'<what>") and fills `sorted` with their
// indices in name order. The names are views into `items`, which must not grow meanwhile.
template <typename T, typename NameOf>
Status IndexUniqueNames(const std::vector<T>& items, NameOf name_of, const char* noun,
                        const char* what, std::vector<size_t>* sorted) {
  std::unordered_set<std::string_view> seen;
  seen.reserve(items.size());
  for (const T& item : items) {
    if (!seen.insert(name_of(item)).second)
      return Status::InvalidArgument(noun + Quoted(name_of(item)) + what);
  }
  sorted->resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) (*sorted)[i] = i;
  std::sort(sorted->begin(), sorted->end(),
            [&](size_t a, size_t b) { return name_of(items[a]) < name_of(items[b]); });
  return Status::Ok();
}

// How Value stores a scalar read as T: integers widened to 64 bits, floats as double.
template <typename T>
using Widened = std::conditional_t<std::is_floating_point_v<T>, double,
                                   std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

}  // namespace

// Parses one GGUF image. Friend of GgufFile so it can fill the private members.
class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, const ReadOptions& opts)
      : bytes_(bytes), opts_(opts) {}

  Status Run(GgufFile* out);

 private:
  uint64_t remaining() const { return bytes_.size() - pos_; }

  Status Need(uint64_t n, const std::string& field) const {
    if (n > remaining()) {
      return Status::InvalidArgument(field + ": file truncated at offset " + std::to_string(pos_) +
                                     " (need " + std::to_string(n) + " bytes, " +
                                     std::to_string(remaining()) + " left)");
    }
    return Status::Ok();
  }

  template <typename T>
  Status ReadLe(T* out, const std::string& field) {
    RETURN_IF_ERROR(Need(sizeof(T), field));
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(bytes_[pos_ + i]) << (8 * i);
    pos_ += sizeof(T);
    if constexpr (std::is_same_v<T, float>) {
      uint32_t bits = static_cast<uint32_t>(v);
      std::memcpy(out, &bits, sizeof(bits));
    } else if constexpr (std::is_same_v<T, double>) {
      std::memcpy(out, &v, sizeof(v));
    } else {
      *out = static_cast<T>(v);
    }
    return Status::Ok();
  }

  Status ReadString(std::string* out, const std::string& field) {
    uint64_t len = 0;
    RETURN_IF_ERROR(ReadLe(&len, field + " (string length)"));
    if (len > opts_.max_string_bytes) {
      return Status::InvalidArgument(field + ": string length " + std::to_string(len) +
                                     " exceeds the limit of " +
                                     std::to_string(opts_.max_string_bytes) + " bytes");
    }
    if (len > remaining()) {
      return Status::InvalidArgument(field + ": string length " + std::to_string(len) +
                                     " at offset " + std::to_string(pos_ - 8) +
                                     " runs past end of file (" + std::to_string(remaining()) +
                                     " bytes left)");
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status::Ok();
  }

  Status ReadValueType(ValueType* out, const std::string& field) {
    uint32_t raw = 0;
    RETURN_IF_ERROR(ReadLe(&raw, field));
    if (!internal::IsKnownValueType(raw))
      return Status::InvalidArgument(field + ": unknown value type " + std::to_string(raw));
    *out = static_cast<ValueType>(raw);
    return Status::Ok();
  }

  // Reads one little-endian T into the widened storage of `out` (uint64, int64 or double).
  template <typename T>
  Status ReadWidened(Value* out, const std::string& field) {
    T v;
    RETURN_IF_ERROR(ReadLe(&v, field));
    out->data = static_cast<Widened<T>>(v);
    return Status::Ok();
  }

  Status ReadScalar(ValueType t, Value* out, const std::string& field);
  Status ReadArray(Value* out, const std::string& field);
  template <typename Elem, typename Read>
  Status ReadElems(uint64_t count, std::vector<Elem>* vec, Read read);
  // Reads `count` scalars of type `et` into a std::vector<Stored> in `out`; each is read as the
  // Value alternative `Held`, under the field name `field_of(index)`.
  template <typename Stored, typename Held = Stored, typename FieldOf>
  Status ReadScalars(ValueType et, uint64_t count, FieldOf field_of, Value* out);

  Status ReadHeader(GgufFile* f, uint64_t* n_tensors, uint64_t* n_kv);
  Status ReadMetadata(GgufFile* f, uint64_t n_kv);
  Status ReadTensorInfos(GgufFile* f, uint64_t n_tensors);
  Status PlaceTensors(GgufFile* f);

  std::span<const uint8_t> bytes_;
  const ReadOptions& opts_;
  uint64_t pos_ = 0;
};

Status GgufParser::ReadScalar(ValueType t, Value* out, const std::string& field) {
  out->type = t;
  if (t == ValueType::kArray) return ReadArray(out, field);
  if (t == ValueType::kString) {
    std::string s;
    RETURN_IF_ERROR(ReadString(&s, field));
    out->data = std::move(s);
    return Status::Ok();
  }
  if (t == ValueType::kBool) {
    uint8_t v;
    RETURN_IF_ERROR(ReadLe(&v, field));
    if (v > 1)
      return Status::InvalidArgument(field + ": bool value " + std::to_string(v) +
                                     " is not 0 or 1");
    out->data = v != 0;
    return Status::Ok();
  }
  return internal::VisitNumeric(
      t, [&](auto c_type) { return ReadWidened<typename decltype(c_type)::type>(out, field); },
      [] { return Status::Ok(); });
}

template <typename Elem, typename Read>
Status GgufParser::ReadElems(uint64_t count, std::vector<Elem>* vec, Read read) {
  // `count` was bounded by the remaining bytes before we get here, so this reserve is at most a
  // small multiple of the file size.
  vec->reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    Elem e{};
    RETURN_IF_ERROR(read(i, &e));
    vec->push_back(std::move(e));
  }
  return Status::Ok();
}

template <typename Stored, typename Held, typename FieldOf>
Status GgufParser::ReadScalars(ValueType et, uint64_t count, FieldOf field_of, Value* out) {
  std::vector<Stored> v;
  RETURN_IF_ERROR(ReadElems(count, &v, [&](uint64_t i, Stored* e) {
    Value tmp;
    RETURN_IF_ERROR(ReadScalar(et, &tmp, field_of(i)));
    *e = static_cast<Stored>(std::get<Held>(tmp.data));
    return Status::Ok();
  }));
  out->data = std::move(v);
  return Status::Ok();
}

Status GgufParser::ReadArray(Value* out, const std::string& field) {
  ValueType et;
  RETURN_IF_ERROR(ReadValueType(&et, field + " (array element type)"));
  if (et == ValueType::kArray) {
    return Status::InvalidArgument(field + ": nested arrays (array of arrays) are not supported");
  }
  uint64_t count = 0;
  RETURN_IF_ERROR(ReadLe(&count, field + " (array count)"));
  if (count > opts_.max_array_elems) {
    return Status::InvalidArgument(field + ": array count " + std::to_string(count) +
                                   " exceeds the limit of " +
                                   std::to_string(opts_.max_array_elems));
  }
  uint64_t min_elem = internal::ScalarSize(et);
  if (count > remaining() / min_elem) {
    return Status::InvalidArgument(field + ": array count " + std::to_string(count) + " of " +
                                   std::string(ValueTypeName(et)) + " needs at least " +
                                   std::to_string(min_elem) + " bytes each but only " +
                                   std::to_string(remaining()) + " bytes are left");
  }
  out->type = ValueType::kArray;
  out->elem_type = et;
  auto elem_field = [&](uint64_t i) { return field + "[" + std::to_string(i) + "]"; };
  // Numbers are read with the array's own field name; a bad bool names its element.
  auto same_field = [&](uint64_t) -> const std::string& { return field; };
  if (internal::IsUnsignedType(et)) {
    RETURN_IF_ERROR(ReadScalars<uint64_t>(et, count, same_field, out));
  } else if (internal::IsSignedType(et)) {
    RETURN_IF_ERROR(ReadScalars<int64_t>(et, count, same_field, out));
  } else if (internal::IsFloatType(et)) {
    RETURN_IF_ERROR(ReadScalars<double>(et, count, same_field, out));
  } else if (et == ValueType::kBool) {
    RETURN_IF_ERROR((ReadScalars<uint8_t, bool>(et, count, elem_field, out)));
  } else {  // strings
    std::vector<std::string> v;
    RETURN_IF_ERROR(ReadElems(count, &v, [&](uint64_t i, std::string* e) {
      // Fast path without building a per-element field name unless there is an error.
      uint64_t start = pos_;
      Status s = ReadString(e, field);
      if (!s.ok()) {
        pos_ = start;
        return ReadString(e, elem_field(i));
      }
      return s;
    }));
    out->data = std::move(v);
  }
  return Status::Ok();
}

Status GgufParser::ReadHeader(GgufFile* f, uint64_t* n_tensors, uint64_t* n_kv) {
  if (bytes_.empty()) return Status::InvalidArgument("header.magic: empty file (not a GGUF file)");
  RETURN_IF_ERROR(Need(4, "header.magic"));
  if (std::memcmp(bytes_.data(), internal::kMagic, 4) != 0) {
    return Status::InvalidArgument("header.magic: not a GGUF file (expected \"GGUF\" magic)");
  }
  pos_ = 4;
  uint32_t version = 0;
  RETURN_IF_ERROR(ReadLe(&version, "header.version"));
  if (version == 1) {
    return Status::InvalidArgument(
        "header.version: GGUF version 1 is not supported (only versions 2 and 3)");
  }
  if (version != 2 && version != 3) {
    uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3) {
      return Status::InvalidArgument("header.version: big-endian GGUF files are not supported");
    }
    return Status::InvalidArgument("header.version: unknown GGUF version " +
                                   std::to_string(version) + " (supported: 2 and 3)");
  }
  f->version_ = version;
  RETURN_IF_ERROR(ReadLe(n_tensors, "header.tensor_count"));
  RETURN_IF_ERROR(ReadLe(n_kv, "header.kv_count"));
  if (*n_tensors > opts_.max_tensors || *n_tensors > remaining() / kMinTensorInfoBytes) {
    return Status::InvalidArgument("header.tensor_count: " + std::to_string(*n_tensors) +
                                   " tensors cannot fit in the " + std::to_string(bytes_.size()) +
                                   "-byte file (or exceed the limit of " +
                                   std::to_string(opts_.max_tensors) + ")");
  }
  if (*n_kv > opts_.max_kv || *n_kv > remaining() / kMinKvBytes) {
    return Status::InvalidArgument(
        "header.kv_count: " + std::to_string(*n_kv) + " key/value pairs cannot fit in the " +
        std::to_string(bytes_.size()) + "-byte file (or exceed the limit of " +
        std::to_string(opts_.max_kv) + ")");
  }
  return Status::Ok();
}

Status GgufParser::ReadMetadata(GgufFile* f, uint64_t n_kv) {
  f->kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    KeyValue kv;
    RETURN_IF_ERROR(ReadString(&kv.key, "metadata[" + std::to_string(i) + "].key"));
    std::string field = "metadata " + Quoted(kv.key);
    ValueType t;
    RETURN_IF_ERROR(ReadValueType(&t, field + " (value type)"));
    RETURN_IF_ERROR(ReadScalar(t, &kv.value, field));
    f->kv_.push_back(std::move(kv));
  }
  // Duplicate check after all keys are in place (string_views stay valid: no more push_backs).
  RETURN_IF_ERROR(IndexUniqueNames(
      f->kv_, [](const KeyValue& kv) -> const std::string& { return kv.key; }, "metadata ",
      ": duplicate key", &f->kv_sorted_));

  if (const Value* a = f->Find(internal::kAlignmentKey)) {
    std::string field = std::string("metadata '") + internal::kAlignmentKey + "'";
    if (a->type != ValueType::kUint32) {
      return Status::InvalidArgument(field + ": must be u32, found " +
                                     internal::TypeDescription(*a));
    }
    uint64_t v = std::get<uint64_t>(a->data);
    if (v == 0 || (v & (v - 1)) != 0) {
      return Status::InvalidArgument(field + ": alignment " + std::to_string(v) +
                                     " is not a nonzero power of two");
    }
    f->alignment_ = v;
  } else {
    f->alignment_ = internal::kDefaultAlignment;
  }
  return Status::Ok();
}

Status GgufParser::ReadTensorInfos(GgufFile* f, uint64_t n_tensors) {
  f->tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo ti;
    RETURN_IF_ERROR(ReadString(&ti.name, "tensor[" + std::to_string(i) + "].name"));
    std::string field = "tensor " + Quoted(ti.name);
    if (ti.name.empty()) field = "tensor[" + std::to_string(i) + "]";
    if (ti.name.empty()) return Status::InvalidArgument(field + ": empty tensor name");
    uint32_t n_dims = 0;
    RETURN_IF_ERROR(ReadLe(&n_dims, field + ": n_dims"));
    if (n_dims == 0 || n_dims > internal::kMaxDims) {
      return Status::InvalidArgument(field + ": n_dims " + std::to_string(n_dims) +
                                     " is out of range (1.." + std::to_string(internal::kMaxDims) +
                                     ")");
    }
    ti.shape.resize(n_dims);
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      std::string dim_field = field + ": dim[" + std::to_string(d) + "]";
      RETURN_IF_ERROR(ReadLe(&ti.shape[d], dim_field));
      if (ti.shape[d] == 0) return Status::InvalidArgument(dim_field + " is zero");
      if (ti.shape[d] > static_cast<uint64_t>(INT64_MAX))
        return Status::InvalidArgument(dim_field + ": " + std::to_string(ti.shape[d]) +
                                       " exceeds INT64_MAX");
      auto prod = CheckedMul(n_elements, ti.shape[d]);
      if (!prod || *prod > static_cast<uint64_t>(INT64_MAX)) {
        return Status::InvalidArgument(field +
                                       ": element count overflows (dims multiply past INT64_MAX)");
      }
      n_elements = *prod;
    }
    ti.n_elements = n_elements;
    uint32_t type_raw = 0;
    RETURN_IF_ERROR(ReadLe(&type_raw, field + ": type"));
    auto traits = GetDTypeTraits(type_raw);
    if (!traits)
      return Status::InvalidArgument(field + ": unknown tensor type " + std::to_string(type_raw));
    ti.type = static_cast<DType>(type_raw);
    auto row = RowBytes(ti.type, ti.shape[0]);
    if (!row) {
      return Status::InvalidArgument(field + ": dim[0] " + std::to_string(ti.shape[0]) +
                                     " is not a multiple of the block size " +
                                     std::to_string(traits->block_size) + " of type " +
                                     std::string(traits->name));
    }
    auto n_bytes = std::optional<uint64_t>(*row);
    for (uint32_t d = 1; d < n_dims && n_bytes; ++d) n_bytes = CheckedMul(*n_bytes, ti.shape[d]);
    if (!n_bytes) return Status::InvalidArgument(field + ": byte size overflows");
    ti.n_bytes = *n_bytes;
    RETURN_IF_ERROR(ReadLe(&ti.offset, field + ": offset"));
    f->tensors_.push_back(std::move(ti));
  }
  return IndexUniqueNames(
      f->tensors_, [](const TensorInfo& t) -> const std::string& { return t.name; }, "tensor ",
      ": duplicate tensor name", &f->tensor_sorted_);
}

Status GgufParser::PlaceTensors(GgufFile* f) {
  auto data_offset = CheckedAlignUp(pos_, f->alignment_);
  if (!data_offset) return Status::InvalidArgument("header: data section offset overflows");
  f->data_offset_ = *data_offset;
  const uint64_t file_size = bytes_.size();
  for (auto& t : f->tensors_) {
    std::string field = "tensor " + Quoted(t.name);
    if (t.offset % f->alignment_ != 0) {
      return Status::InvalidArgument(field + ": offset " + std::to_string(t.offset) +
                                     " is not a multiple of the alignment " +
                                     std::to_string(f->alignment_));
    }
    auto start = CheckedAdd(f->data_offset_, t.offset);
    auto end = start ? CheckedAdd(*start, t.n_bytes) : std::nullopt;
    if (!end || *end > file_size) {
      return Status::InvalidArgument(
          field + ": data [offset " + std::to_string(t.offset) + ", " + std::to_string(t.n_bytes) +
          " bytes] runs past end of file (data section at " + std::to_string(f->data_offset_) +
          ", file size " + std::to_string(file_size) + ")");
    }
    t.data = bytes_.data() + *start;
  }
  // Overlapping tensors are rejected: no writer produces them, and aliasing weights would let a
  // hostile file make two "different" tensors share (and disagree about) the same bytes.
  std::vector<size_t> by_offset(f->tensors_.size());
  for (size_t i = 0; i < by_offset.size(); ++i) by_offset[i] = i;
  std::sort(by_offset.begin(), by_offset.end(),
            [&](size_t a, size_t b) { return f->tensors_[a].offset < f->tensors_[b].offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const auto& prev = f->tensors_[by_offset[k - 1]];
    const auto& cur = f->tensors_[by_offset[k]];
    if (cur.offset < prev.offset + prev.n_bytes) {  // no overflow: both end inside the file
      return Status::InvalidArgument("tensor " + Quoted(cur.name) + ": data [offset " +
                                     std::to_string(cur.offset) + "] overlaps tensor " +
                                     Quoted(prev.name) + " [offset " + std::to_string(prev.offset) +
                                     ", " + std::to_string(prev.n_bytes) + " bytes]");
    }
  }
  return Status::Ok();
}

Status GgufParser::Run(GgufFile* f) {
  f->bytes_ = bytes_;
  uint64_t n_tensors = 0, n_kv = 0;
  RETURN_IF_ERROR(ReadHeader(f, &n_tensors, &n_kv));
  RETURN_IF_ERROR(ReadMetadata(f, n_kv));
  RETURN_IF_ERROR(ReadTensorInfos(f, n_tensors));
  return PlaceTensors(f);
}

Result<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes,
                                                  const ReadOptions& opts) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  GgufParser parser(bytes, opts);
  RETURN_IF_ERROR(parser.Run(f.get()));
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path, const ReadOptions& opts) {
  auto mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  std::unique_ptr<MappedFile> file = std::move(mapped).value();
  std::unique_ptr<GgufFile> f(new GgufFile());
  GgufParser parser(file->bytes(), opts);
  Status s = parser.Run(f.get());
  if (!s.ok()) return s.WithContext(path);
  f->file_ = std::move(file);
  f->path_ = path;
  return f;
}

}  // namespace strata::gguf

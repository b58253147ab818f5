// GGUF v3 writer: header, metadata in insertion order, tensor infos, zero padding to the
// alignment, then each tensor's bytes padded to the alignment.
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <unordered_set>
#include <utility>

#include "base/checked.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

namespace strata::gguf {

namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}

  template <typename T>
  void Le(T v) {
    uint64_t bits = 0;
    if constexpr (std::is_same_v<T, float>) {
      uint32_t b;
      std::memcpy(&b, &v, sizeof(b));
      bits = b;
    } else if constexpr (std::is_same_v<T, double>) {
      std::memcpy(&bits, &v, sizeof(bits));
    } else {
      // Through the unsigned type of the same size: only its sizeof(T) bytes are written.
      bits = static_cast<std::make_unsigned_t<T>>(v);
    }
    for (size_t i = 0; i < sizeof(T); ++i) out_->push_back(static_cast<uint8_t>(bits >> (8 * i)));
  }
  void Str(const std::string& s) {
    Le<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void PadTo(uint64_t align) {
    while (out_->size() % align != 0) out_->push_back(0);
  }

 private:
  std::vector<uint8_t>* out_;
};

// Writes v as a little-endian Wire; an integer outside Wire's range is refused.
template <typename Wire, typename Stored>
Status EmitAs(ByteSink& s, const std::string& field, ValueType t, Stored v) {
  if constexpr (std::is_integral_v<Wire> && std::is_integral_v<Stored>) {
    if (!std::in_range<Wire>(v)) {
      return Status::InvalidArgument(field + ": value " + std::to_string(v) + " does not fit in " +
                                     std::string(ValueTypeName(t)));
    }
  }
  s.Le<Wire>(static_cast<Wire>(v));
  return Status::Ok();
}

// Writes one number of type t taken from its widened storage (uint64, int64 or double).
template <typename Stored>
Status EmitNumber(ByteSink& s, const std::string& field, ValueType t, Stored v) {
  return internal::VisitNumeric(
      t, [&](auto c_type) { return EmitAs<typename decltype(c_type)::type>(s, field, t, v); },
      [&] { return Status::Internal(field + ": not a numeric type"); });
}

Status Mismatch(const std::string& field, const Value& v) {
  return Status::InvalidArgument(field + ": storage does not match declared type " +
                                 internal::TypeDescription(v));
}

// Writes the storage of v through emit_one(x): a scalar held as ScalarT, or an array held as
// std::vector<ElemT> (its count first). Fails if v holds another alternative.
template <typename ScalarT, typename ElemT = ScalarT, typename EmitOne>
Status EmitStorage(ByteSink& s, const std::string& field, const Value& v, EmitOne emit_one) {
  if (!v.is_array()) {
    const auto* x = std::get_if<ScalarT>(&v.data);
    if (!x) return Mismatch(field, v);
    return emit_one(*x);
  }
  const auto* vec = std::get_if<std::vector<ElemT>>(&v.data);
  if (!vec) return Mismatch(field, v);
  s.Le<uint64_t>(vec->size());
  for (const ElemT& x : *vec) RETURN_IF_ERROR(emit_one(x));
  return Status::Ok();
}

Status EmitValue(ByteSink& s, const std::string& field, const Value& v) {
  ValueType t = v.type;  // for an array: its element type
  if (v.is_array()) {
    t = v.elem_type;
    if (t == ValueType::kArray)
      return Status::InvalidArgument(field + ": nested arrays are not supported");
    if (!internal::IsKnownValueType(static_cast<uint32_t>(t)))
      return Status::InvalidArgument(field + ": unknown array element type");
    s.Le<uint32_t>(static_cast<uint32_t>(ValueType::kArray));
  }
  s.Le<uint32_t>(static_cast<uint32_t>(t));
  auto number = [&](auto x) { return EmitNumber(s, field, t, x); };
  if (t == ValueType::kString) {
    return EmitStorage<std::string>(s, field, v, [&](const std::string& x) {
      s.Str(x);
      return Status::Ok();
    });
  }
  if (t == ValueType::kBool) {
    return EmitStorage<bool, uint8_t>(s, field, v, [&](auto b) {
      s.Le<uint8_t>(b ? 1 : 0);
      return Status::Ok();
    });
  }
  if (internal::IsUnsignedType(t)) return EmitStorage<uint64_t>(s, field, v, number);
  if (internal::IsSignedType(t)) return EmitStorage<int64_t>(s, field, v, number);
  if (internal::IsFloatType(t)) return EmitStorage<double>(s, field, v, number);
  return Status::InvalidArgument(field + ": unknown value type " +
                                 std::to_string(static_cast<uint32_t>(t)));
}

}  // namespace

void GgufWriter::Set(std::string key, Value value) {
  for (auto& kv : kv_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kv_.push_back({std::move(key), std::move(value)});
}

Status GgufWriter::AddTensor(std::string name, DType type, std::vector<uint64_t> shape,
                             std::vector<uint8_t> data) {
  std::string field = "tensor '" + name + "'";
  if (name.empty()) return Status::InvalidArgument("tensor: empty name");
  for (const auto& t : tensors_) {
    if (t.name == name) return Status::InvalidArgument(field + ": duplicate tensor name");
  }
  if (shape.empty() || shape.size() > internal::kMaxDims) {
    return Status::InvalidArgument(field + ": " + std::to_string(shape.size()) +
                                   " dims (must be 1.." + std::to_string(internal::kMaxDims) + ")");
  }
  auto traits = GetDTypeTraits(type);
  if (!traits)
    return Status::InvalidArgument(field + ": unknown type " +
                                   std::to_string(static_cast<uint32_t>(type)));
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0)
      return Status::InvalidArgument(field + ": dim[" + std::to_string(d) + "] is zero");
  }
  auto bytes = RowBytes(type, shape[0]);
  if (!bytes) {
    return Status::InvalidArgument(field + ": dim[0] " + std::to_string(shape[0]) +
                                   " is not a multiple of the block size " +
                                   std::to_string(traits->block_size));
  }
  std::optional<uint64_t> n_elements = shape[0];
  for (size_t d = 1; d < shape.size() && bytes && n_elements; ++d) {
    bytes = CheckedMul(*bytes, shape[d]);
    n_elements = CheckedMul(*n_elements, shape[d]);
  }
  if (!bytes || !n_elements || *n_elements > static_cast<uint64_t>(INT64_MAX))
    return Status::InvalidArgument(field + ": size overflows");
  if (*bytes != data.size()) {
    return Status::InvalidArgument(field + ": data has " + std::to_string(data.size()) +
                                   " bytes, shape and type need " + std::to_string(*bytes));
  }
  tensors_.push_back({std::move(name), type, std::move(shape), std::move(data)});
  return Status::Ok();
}

Result<std::vector<uint8_t>> GgufWriter::WriteToBuffer() const {
  uint64_t alignment = internal::kDefaultAlignment;
  for (const auto& kv : kv_) {
    if (kv.key != internal::kAlignmentKey) continue;
    const auto* u = std::get_if<uint64_t>(&kv.value.data);
    if (kv.value.type != ValueType::kUint32 || !u || *u == 0 || (*u & (*u - 1)) != 0 ||
        *u > UINT32_MAX) {
      return Status::InvalidArgument(std::string("metadata '") + internal::kAlignmentKey +
                                     "': must be a u32 nonzero power of two");
    }
    alignment = *u;
  }
  std::vector<uint8_t> out;
  uint64_t data_bytes = 0;
  for (const auto& t : tensors_) data_bytes += t.data.size() + alignment;
  out.reserve(static_cast<size_t>(data_bytes) + 4096);
  ByteSink s(&out);
  out.insert(out.end(), internal::kMagic, internal::kMagic + 4);
  s.Le<uint32_t>(internal::kWriteVersion);
  s.Le<uint64_t>(tensors_.size());
  s.Le<uint64_t>(kv_.size());
  for (const auto& kv : kv_) {
    s.Str(kv.key);
    RETURN_IF_ERROR(EmitValue(s, "metadata '" + kv.key + "'", kv.value));
  }
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  offsets.reserve(tensors_.size());
  for (const auto& t : tensors_) {
    s.Str(t.name);
    s.Le<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) s.Le<uint64_t>(d);
    s.Le<uint32_t>(static_cast<uint32_t>(t.type));
    s.Le<uint64_t>(offset);
    offsets.push_back(offset);
    auto next = CheckedAlignUp(offset + t.data.size(), alignment);
    if (!next) return Status::InvalidArgument("tensor '" + t.name + "': data offset overflows");
    offset = *next;
  }
  s.PadTo(alignment);
  const uint64_t data_start = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    // Each blob starts at data_start + its offset; the padding between blobs is zeros.
    out.resize(static_cast<size_t>(data_start + offsets[i]), 0);
    out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
    s.PadTo(alignment);
  }
  return out;
}

Status GgufWriter::WriteFile(const std::string& path) const {
  ASSIGN_OR_RETURN(std::vector<uint8_t> buf, WriteToBuffer());
  std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return Status::IoError("cannot create " + tmp + ": " + std::strerror(errno));
  size_t written = buf.empty() ? 0 : std::fwrite(buf.data(), 1, buf.size(), f);
  bool ok = written == buf.size();
  ok = (std::fflush(f) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return Status::IoError("short write to " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    return Status::IoError("cannot rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace strata::gguf

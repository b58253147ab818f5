#include "tensor/dtype.h"

#include <array>
#include <string>

#include "base/ascii.h"
#include "base/checked.h"

namespace strata {
namespace {

struct Entry {
  uint32_t id;
  DTypeTraits traits;
};

constexpr Entry kTable[] = {
    {0, {"f32", 1, 4, true}},          {1, {"f16", 1, 2, true}},
    {2, {"q4_0", 32, 18, true}},       {3, {"q4_1", 32, 20, false}},
    {6, {"q5_0", 32, 22, false}},      {7, {"q5_1", 32, 24, false}},
    {8, {"q8_0", 32, 34, true}},       {9, {"q8_1", 32, 36, false}},
    {10, {"q2_K", 256, 84, false}},    {11, {"q3_K", 256, 110, false}},
    {12, {"q4_K", 256, 144, true}},    {13, {"q5_K", 256, 176, true}},
    {14, {"q6_K", 256, 210, true}},    {15, {"q8_K", 256, 292, false}},
    {16, {"iq2_xxs", 256, 66, false}}, {17, {"iq2_xs", 256, 74, false}},
    {18, {"iq3_xxs", 256, 98, false}}, {19, {"iq1_s", 256, 50, false}},
    {20, {"iq4_nl", 32, 18, false}},   {21, {"iq3_s", 256, 110, false}},
    {22, {"iq2_s", 256, 82, false}},   {23, {"iq4_xs", 256, 136, false}},
    {24, {"i8", 1, 1, false}},         {25, {"i16", 1, 2, false}},
    {26, {"i32", 1, 4, false}},        {27, {"i64", 1, 8, false}},
    {28, {"f64", 1, 8, false}},        {29, {"iq1_m", 256, 56, false}},
    {30, {"bf16", 1, 2, true}},        {34, {"tq1_0", 256, 54, false}},
    {35, {"tq2_0", 256, 66, false}},   {39, {"mxfp4", 32, 17, false}},
};

}  // namespace

std::optional<DTypeTraits> GetDTypeTraits(uint32_t type_id) {
  for (const auto& e : kTable)
    if (e.id == type_id) return e.traits;
  return std::nullopt;
}

std::string_view DTypeName(DType t) {
  auto tr = GetDTypeTraits(t);
  return tr ? tr->name : std::string_view("unknown");
}

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& e : kTable) {
    if (EqualsIgnoreCase(e.traits.name, name)) return static_cast<DType>(e.id);
  }
  return std::nullopt;
}

std::optional<uint64_t> RowBytes(DType t, uint64_t n) {
  auto tr = GetDTypeTraits(t);
  if (!tr || n % tr->block_size != 0) return std::nullopt;
  return CheckedMul(n / tr->block_size, tr->type_size);
}

}  // namespace strata

// libFuzzer target: GgufFile::Parse on arbitrary bytes, then touches every metadata value and
// the first and last byte of every tensor so that out-of-bounds spans are caught by ASan.
#include <cstddef>
#include <cstdint>
#include <span>

#include "gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata::gguf;
  ReadOptions opts;
  // Keep per-input work small: bounded by the input size anyway, these just cap the worst case.
  opts.max_array_elems = 1 << 20;
  auto r = GgufFile::Parse(std::span<const uint8_t>(data, size), opts);
  if (!r.ok()) {
    volatile size_t n = r.status().message().size();
    (void)n;
    return 0;
  }
  const GgufFile& f = **r;
  volatile uint64_t sink = f.alignment() + f.data_offset() + f.version();
  for (const auto& kv : f.metadata()) {
    sink = sink + kv.value.ToDisplayString(4).size() + kv.value.array_size();
    sink = sink + f.GetUint(kv.key).ok() + f.GetInt(kv.key).ok() + f.GetFloat(kv.key).ok() +
           f.GetString(kv.key).ok() + f.GetBool(kv.key).ok() + f.GetStringArray(kv.key).ok() +
           f.GetIntArray(kv.key).ok() + f.GetFloatArray(kv.key).ok();
    if (f.Find(kv.key) != &kv.value) __builtin_trap();
  }
  for (const auto& t : f.tensors()) {
    if (f.FindTensor(t.name) != &t) __builtin_trap();
    if (t.n_bytes == 0 || t.data < data || t.data + t.n_bytes > data + size) __builtin_trap();
    sink = sink + t.data[0] + t.data[t.n_bytes - 1];
  }
  (void)sink;
  return 0;
}

// `strata info MODEL`: prints a GGUF file's header, metadata and a tensor summary (text or JSON).
// `strata info --cpu`: the CPU, its kernel ISA level and the kernel variant MatMul runs per weight
// type (kernels::DescribeKernels), with the reason.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "app/commands.h"
#include "control/devices.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

namespace strata::app {
namespace {

struct InfoArgs {
  std::string model;
  bool json = false;
  bool cpu = false;
  size_t max_items = 8;
};

// The CPU's identity (cpuid, no timing probe) and the kernel variants chosen for it.
int RunInfoCpu(bool json) {
  const control::CpuIdentity id = control::ThisCpu();
  const std::vector<std::string>& features = id.features;
  const std::string brand = fmt::format("{} (family {}, model {})", id.brand, id.family, id.model);
  const std::string detected(kernels::IsaName(kernels::DetectIsa()));
  const std::string active(kernels::IsaName(kernels::ActiveIsa()));
  const std::vector<kernels::KernelVariant> table = kernels::DescribeKernels();
  if (json) {
    nlohmann::json j = {
        {"cpu", brand}, {"features", features}, {"isa_detected", detected}, {"isa", active}};
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& v : table)
      rows.push_back({{"type", std::string(DTypeName(v.type))},
                      {"decode", v.decode},
                      {"prefill", v.prefill},
                      {"layout", v.layout},
                      {"why", v.why}});
    j["kernels"] = rows;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "cpu: {}\nfeatures: {}\nkernel isa: {} (detected {}; STRATA_ISA lowers it)\n\n", brand,
      fmt::join(features, " "), active, detected);
  for (const auto& v : table)
    std::cout << fmt::format(
        "{:<5} decode:  {}\n      prefill: {}\n      layout:  {}\n      why:     {}\n",
        DTypeName(v.type), v.decode, v.prefill, v.layout, v.why);
  return 0;
}

struct TypeTotals {
  uint64_t tensors = 0;
  uint64_t params = 0;
  uint64_t bytes = 0;
};

std::string TypeString(const gguf::Value& v) {
  if (!v.is_array()) return std::string(gguf::ValueTypeName(v.type));
  return fmt::format("array[{}]", gguf::ValueTypeName(v.elem_type));
}

std::string ShapeString(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

nlohmann::json ScalarJson(const gguf::Value& v, size_t max_items) {
  if (v.is_array()) {
    return {{"elem_type", std::string(gguf::ValueTypeName(v.elem_type))},
            {"count", v.array_size()},
            {"preview", v.ToDisplayString(max_items)}};
  }
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
  if (const auto* d = std::get_if<double>(&v.data)) return *d;
  if (const auto* b = std::get_if<bool>(&v.data)) return *b;
  if (const auto* s = std::get_if<std::string>(&v.data)) return *s;
  return nullptr;
}

std::map<std::string, TypeTotals> Totals(const gguf::GgufFile& f, TypeTotals* all) {
  std::map<std::string, TypeTotals> by_type;
  for (const auto& t : f.tensors()) {
    auto& tt = by_type[std::string(DTypeName(t.type))];
    for (TypeTotals* x : {&tt, all}) {
      x->tensors += 1;
      x->params += t.n_elements;
      x->bytes += t.n_bytes;
    }
  }
  return by_type;
}

void PrintJson(const gguf::GgufFile& f, size_t max_items) {
  nlohmann::json j;
  j["path"] = f.path();
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  j["file_size"] = f.file_size();
  auto& md = j["metadata"] = nlohmann::json::array();
  for (const auto& kv : f.metadata()) {
    md.push_back({{"key", kv.key},
                  {"type", TypeString(kv.value)},
                  {"value", ScalarJson(kv.value, max_items)}});
  }
  auto& ts = j["tensors"] = nlohmann::json::array();
  for (const auto& t : f.tensors()) {
    ts.push_back({{"name", t.name},
                  {"type", std::string(DTypeName(t.type))},
                  {"shape", t.shape},
                  {"offset", t.offset},
                  {"params", t.n_elements},
                  {"bytes", t.n_bytes}});
  }
  TypeTotals all;
  auto by_type = Totals(f, &all);
  auto& bt = j["by_type"] = nlohmann::json::object();
  for (const auto& [name, tt] : by_type)
    bt[name] = {{"tensors", tt.tensors}, {"params", tt.params}, {"bytes", tt.bytes}};
  j["total"] = {{"tensors", all.tensors}, {"params", all.params}, {"bytes", all.bytes}};
  // Metadata strings come from the file and may be invalid UTF-8: replace rather than throw.
  std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

void PrintText(const gguf::GgufFile& f, size_t max_items) {
  std::cout << fmt::format("file:        {}\n", f.path());
  std::cout << fmt::format(
      "gguf:        version {}, alignment {}, data offset {}, file size {} bytes\n", f.version(),
      f.alignment(), f.data_offset(), f.file_size());

  size_t key_w = 3;
  for (const auto& kv : f.metadata()) key_w = std::max(key_w, std::min<size_t>(kv.key.size(), 60));
  std::cout << fmt::format("\nmetadata ({} keys):\n", f.metadata().size());
  std::cout << fmt::format("  {:<{}}  {:<14}  {}\n", "KEY", key_w, "TYPE", "VALUE");
  for (const auto& kv : f.metadata()) {
    std::cout << fmt::format("  {:<{}}  {:<14}  {}\n", kv.key, key_w, TypeString(kv.value),
                             kv.value.ToDisplayString(max_items));
  }

  size_t name_w = 4, shape_w = 5;
  for (const auto& t : f.tensors()) {
    name_w = std::max(name_w, std::min<size_t>(t.name.size(), 60));
    shape_w = std::max(shape_w, ShapeString(t.shape).size());
  }
  std::cout << fmt::format("\ntensors ({}):\n", f.tensors().size());
  if (!f.tensors().empty()) {
    std::cout << fmt::format("  {:<{}}  {:<8}  {:<{}}  {:>12}\n", "NAME", name_w, "TYPE", "SHAPE",
                             shape_w, "BYTES");
    for (const auto& t : f.tensors()) {
      std::cout << fmt::format("  {:<{}}  {:<8}  {:<{}}  {:>12}\n", t.name, name_w,
                               DTypeName(t.type), ShapeString(t.shape), shape_w, t.n_bytes);
    }
  }

  TypeTotals all;
  auto by_type = Totals(f, &all);
  if (!by_type.empty()) {
    std::cout << "\nby type:\n";
    std::cout << fmt::format("  {:<8}  {:>7}  {:>14}  {:>14}\n", "TYPE", "TENSORS", "PARAMS",
                             "BYTES");
    for (const auto& [name, tt] : by_type)
      std::cout << fmt::format("  {:<8}  {:>7}  {:>14}  {:>14}\n", name, tt.tensors, tt.params,
                               tt.bytes);
  }
  std::cout << fmt::format("\ntotal: {} tensors, {} params, {} bytes ({:.2f} MiB)\n", all.tensors,
                           all.params, all.bytes,
                           static_cast<double>(all.bytes) / (1024.0 * 1024.0));
}

int RunInfo(const InfoArgs& a) {
  if (a.cpu) return RunInfoCpu(a.json);
  if (a.model.empty()) {
    std::cerr << "error: give a model path, or --cpu\n";
    return 1;
  }
  auto f = gguf::GgufFile::Open(a.model);
  if (!f.ok()) {
    std::cerr << "error: " << f.status().message() << "\n";
    return 1;
  }
  if (a.json) {
    PrintJson(**f, a.max_items);
  } else {
    PrintText(**f, a.max_items);
  }
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "error: failed to write output\n";
    return 1;
  }
  return 0;
}

}  // namespace

void RegisterInfo(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "info",
      "Print a GGUF file's header, metadata and tensor summary (or, with --cpu, the kernels)");
  cmd->add_option("model", args->model, "Path of the GGUF file");
  cmd->add_flag("--cpu", args->cpu,
                "Print the CPU, its kernel ISA level and the kernel variant per weight type");
  cmd->add_flag("--json", args->json, "Print JSON instead of text");
  cmd->add_option("--max-items", args->max_items, "Array elements shown per metadata value")
      ->capture_default_str();
  cmd->callback([args, exit_code] { *exit_code = RunInfo(*args); });
}

}  // namespace strata::app

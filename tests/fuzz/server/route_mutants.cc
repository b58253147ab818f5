// The structure-aware enumeration over the route corpus (route_corpus/: "METHOD PATH\n" + a valid
// JSON body per file): for every seed, every value at every path (recursively, the root included)
// is replaced in turn by every other JSON type, empty values, huge values (a 1 MiB string, 1e308,
// 2^64, -2^63, a 100,000-element array) and 10,000 levels of nesting, and each mutant goes through
// the real route handler in process (route_harness.h). Fails when any answer is a 5xx or missing
// (a hang), when a seed itself is not a 2xx, or when KV blocks stay in use afterwards.
// Deterministic; run by ctest (route_mutants).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "route_harness.h"

namespace {

using nlohmann::json;

constexpr const char* kPlaceholder = "\x01MUTANT\x01";

// Replacement values: JSON, or raw text substituted into the dumped body (`raw`).
struct Replacement {
  std::string name;
  json value;
  std::string raw;
};

std::vector<Replacement> Replacements() {
  std::vector<Replacement> r = {
      {"null", nullptr, ""},
      {"true", true, ""},
      {"false", false, ""},
      {"zero", 0, ""},
      {"minus one", -1, ""},
      {"fraction", 3.5, ""},
      {"1e308", 1e308, ""},
      {"-1e308", -1e308, ""},
      {"2^64", nullptr, "18446744073709551616"},
      {"2^64-1", nullptr, "18446744073709551615"},
      {"-2^63", nullptr, "-9223372036854775808"},
      {"empty string", "", ""},
      {"string", "x", ""},
      {"1 MiB string", std::string(1 << 20, 'a'), ""},
      {"empty array", json::array(), ""},
      {"array", json::array({1, "x", nullptr}), ""},
      {"100k array", json(std::vector<int>(100000, 1)), ""},
      {"empty object", json::object(), ""},
      {"object", json{{"a", 1}}, ""},
      {"10k nesting", nullptr, std::string(10000, '[') + std::string(10000, ']')},
      {"10k object nesting", nullptr,
       [] {
         std::string s;
         for (int i = 0; i < 10000; ++i) s += "{\"a\":";
         return s + "1" + std::string(10000, '}');
       }()},
  };
  return r;
}

// Every JSON pointer inside `j` (the root as "").
void Paths(const json& j, const json::json_pointer& at, std::vector<json::json_pointer>* out) {
  out->push_back(at);
  if (j.is_object())
    for (const auto& [k, v] : j.items()) Paths(v, at / k, out);
  else if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i) Paths(j[i], at / i, out);
}

std::string Mutant(const json& seed, const json::json_pointer& at, const Replacement& r) {
  json m = seed;
  m[at] = r.raw.empty() ? r.value : json(kPlaceholder);
  std::string text = m.dump();
  if (!r.raw.empty()) {
    const std::string quoted = json(kPlaceholder).dump();
    text.replace(text.find(quoted), quoted.size(), r.raw);
  }
  return text;
}

struct Seed {
  std::string file, method, path;
  json body;
};

std::vector<Seed> LoadSeeds(const std::filesystem::path& dir) {
  std::vector<Seed> seeds;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".seed") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    std::ifstream in(p, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t nl = text.find('\n'), sp = text.find(' ');
    Seed s{p.filename().string(), text.substr(0, sp), text.substr(sp + 1, nl - sp - 1), {}};
    s.body = json::parse(text.substr(nl + 1), nullptr, false);
    if (s.body.is_discarded()) {
      std::fprintf(stderr, "route_mutants: %s: not valid JSON after the first line\n",
                   s.file.c_str());
      return {};
    }
    seeds.push_back(std::move(s));
  }
  return seeds;
}

}  // namespace

namespace {

int Run(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: route_mutants <route_corpus dir>\n");
    return 2;
  }
  std::vector<Seed> seeds = LoadSeeds(argv[1]);
  if (seeds.empty()) {
    std::fprintf(stderr, "route_mutants: no *.seed files in %s\n", argv[1]);
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Replacement> reps = Replacements();
  strata::fuzz::RouteHarness h;
  std::map<int, long> by_class;
  long failures = 0, total = 0;
  for (const Seed& seed : seeds) {
    std::string resp;
    int st = h.Send(seed.method, seed.path, seed.body.dump(), &resp);
    ++total;
    if (st < 200 || st >= 300) {
      std::fprintf(stderr, "FAIL seed %s answered %d: %.300s\n", seed.file.c_str(), st,
                   resp.c_str());
      ++failures;
    }
    std::vector<json::json_pointer> paths;
    Paths(seed.body, json::json_pointer(), &paths);
    for (const auto& at : paths) {
      for (const Replacement& r : reps) {
        st = h.Send(seed.method, seed.path, Mutant(seed.body, at, r), &resp);
        ++total;
        ++by_class[st / 100];
        if (st == 0 || st >= 500) {
          ++failures;
          std::fprintf(stderr, "FAIL %s: %s <- %s answered %d: %.300s\n", seed.file.c_str(),
                       at.to_string().c_str(), r.name.c_str(), st, resp.c_str());
        }
      }
    }
  }
  // Nothing leaks: every request finished and gave its KV blocks back.
  for (int i = 0; i < 2000 && (h.api().live_jobs() > 0 || h.engine().Stats().kv_used_blocks > 0);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto stats = h.engine().Stats();
  if (h.api().live_jobs() != 0 || stats.kv_used_blocks != 0) {
    std::fprintf(stderr, "FAIL: %d jobs live, %d KV blocks used after the run\n",
                 h.api().live_jobs(), static_cast<int>(stats.kv_used_blocks));
    ++failures;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "route_mutants: %zu seeds, %ld requests in %.1f s: 2xx %ld, 4xx %ld, 5xx %ld, "
      "none %ld; %ld failures\n",
      seeds.size(), total, s, by_class[2], by_class[4], by_class[5], by_class[0], failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {  // a broken corpus directory, say: fail, never abort
    std::fprintf(stderr, "route_mutants: %s\n", e.what());
    return 1;
  }
}

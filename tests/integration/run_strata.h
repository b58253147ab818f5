// RunStrata: runs the real `strata` binary (STRATA_BIN, defined by the test target) with a shell
// argument string and captures its exit code, stdout and stderr. Each call writes stderr to its own
// file (per process and call): ctest runs tests as parallel processes, and a shared name would let
// one test read another's stderr. Errors: exit_code is -1 when the process could not be started
// or did not exit normally.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace strata::testing {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline RunResult RunStrata(const std::string& args) {
  static int call = 0;
  const std::string err_file = ::testing::TempDir() + "/strata_run_stderr." +
                               std::to_string(::getpid()) + "." + std::to_string(call++) + ".txt";
  const std::string cmd = std::string(STRATA_BIN) + " " + args + " 2>" + err_file;
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(err_file);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  std::filesystem::remove(err_file);
  return r;
}

}  // namespace strata::testing

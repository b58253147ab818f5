// RunCommand: runs a shell command line (popen) and captures its stdout; for tests that drive
// external tools (node, chromium, kubectl, promtool). Redirect stderr in `cmd` to capture it too.
// Errors: returns the exit status, or -1 when the shell could not be started or the command did
// not exit normally (killed by a signal). Thread contract: none needed (no shared state).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace strata::testing {

inline int RunCommand(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::array<char, 8192> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out->append(buf.data(), n);
  const int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace strata::testing

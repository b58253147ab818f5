#include "app/cli_common.h"

#include <pthread.h>

#include <cstdio>
#include <iostream>

namespace strata::app {

CLI::Option* AddThreadsFlag(CLI::App* cmd, int* threads) {
  return cmd->add_option("-t,--threads", *threads, "Threads (default: all cores)");
}

CLI::Option* AddRepsFlag(CLI::App* cmd, int* reps) {
  return AddDefaulted(cmd, "-r,--reps", *reps, "Repetitions (median reported)");
}

void ReportError(const Status& s, int* exit_code) {
  if (s.ok()) return;
  std::cerr << "error: " << s.message() << "\n";
  *exit_code = 1;
}

void ReportError(const Status& s, const char* prefix, int* exit_code) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", prefix, s.ToString().c_str());
  *exit_code = 1;
}

sigset_t BlockSignals(std::initializer_list<int> signals) {
  sigset_t sigs;
  sigemptyset(&sigs);
  for (int sig : signals) sigaddset(&sigs, sig);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  return sigs;
}

}  // namespace strata::app

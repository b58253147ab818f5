// What the subcommands' wiring shares: options that show their default, how a command reports a
// failed Status (message and exit code), and the signal mask of the commands that run until
// SIGINT/SIGTERM. Thread contract: the CLI parsing thread (BlockSignals: the thread that will
// sigwait, before it starts any other).
#pragma once

#include <signal.h>

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <string>

#include "base/status.h"

namespace strata::app {

// An option whose --help shows its default (the value bound when the command is registered).
template <typename T>
CLI::Option* AddDefaulted(CLI::App* cmd, const std::string& names, T& value,
                          const std::string& help) {
  return cmd->add_option(names, value, help)->capture_default_str();
}

// The flags the single-process commands share, same names and help everywhere: -t,--threads
// (compute threads; 0, the default: all cores) of generate, bench model and bench memory, and
// -r,--reps (repetitions of a benchmark, the median reported, the default shown) of bench model,
// memory and offline.
CLI::Option* AddThreadsFlag(CLI::App* cmd, int* threads);
CLI::Option* AddRepsFlag(CLI::App* cmd, int* reps);

// A failed `s`: "error: MESSAGE" on stderr and exit code 1 (bench, generate). An ok `s`: nothing.
void ReportError(const Status& s, int* exit_code);
// A failed `s`: "PREFIX: STATUS" on stderr (the code and the message) and exit code 1 (serve,
// gateway, autoscaler, render). An ok `s`: nothing.
void ReportError(const Status& s, const char* prefix, int* exit_code);

// Blocks `signals` in the calling thread, and so in every thread it starts afterwards (they inherit
// the mask); the caller waits for them with sigwait on the returned set.
sigset_t BlockSignals(std::initializer_list<int> signals);

}  // namespace strata::app

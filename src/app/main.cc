// strata: one binary, many subcommands.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "app/commands.h"

namespace strata::app {

std::string SelfPath() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("build/bin/strata");
}

std::string DefaultModelPath() {
  std::filesystem::path exe = SelfPath();
  return (exe.parent_path().parent_path() / "models" / "strata-tiny.gguf").string();
}

}  // namespace strata::app

namespace strata::app {
namespace {

int Run(int argc, char** argv) {
  CLI::App app{"strata: an LLM serving stack (engine, server, gateway)"};
  app.require_subcommand(1);
  int exit_code = 0;
  RegisterInfo(app, &exit_code);
  RegisterSynth(app, &exit_code);
  RegisterTokenize(app, &exit_code);
  RegisterGenerate(app, &exit_code);
  RegisterBench(app, &exit_code);
  RegisterServe(app, &exit_code);
  RegisterGateway(app, &exit_code);
  RegisterUp(app, &exit_code);
  RegisterDevices(app, &exit_code);
  RegisterAutoscaler(app, &exit_code);
  RegisterRender(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}

}  // namespace
}  // namespace strata::app

// The last resort for the process: an exception that escapes a command is reported, not an abort.
int main(int argc, char** argv) {
  try {
    return strata::app::Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "strata: internal error (unknown exception)\n");
  }
  return 70;  // EX_SOFTWARE
}

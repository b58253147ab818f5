// strata: one binary, many subcommands.
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <iostream>

#include "app/commands.h"

namespace strata::app {

std::string DefaultModelPath() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::filesystem::path exe = n > 0 ? std::filesystem::path(std::string(buf, static_cast<size_t>(n)))
                                    : std::filesystem::path("build/bin/strata");
  return (exe.parent_path().parent_path() / "models" / "strata-tiny.gguf").string();
}

}  // namespace strata::app

int main(int argc, char** argv) {
  CLI::App app{"strata: an LLM serving stack (engine, server, gateway)"};
  app.require_subcommand(1);
  int exit_code = 0;
  strata::app::RegisterInfo(app, &exit_code);
  strata::app::RegisterSynth(app, &exit_code);
  strata::app::RegisterTokenize(app, &exit_code);
  strata::app::RegisterGenerate(app, &exit_code);
  strata::app::RegisterBench(app, &exit_code);
  strata::app::RegisterServe(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}

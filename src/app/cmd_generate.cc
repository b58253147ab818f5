#include "app/commands.h"

namespace strata::app {

void RegisterGenerate(CLI::App& app, int* exit_code) {
  (void)app;
  (void)exit_code;
}

}  // namespace strata::app

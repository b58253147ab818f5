// `strata devices [--json] [--reference]`: this machine's DeviceProfiles (the CPU measured by a
// short probe, GPUs when a driver reports them), or the reference cluster's datasheet profiles.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "control/devices.h"

namespace strata::app {

void RegisterDevices(CLI::App& app, int* exit_code) {
  struct Args {
    bool json = false, reference = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "devices", "Print this machine's devices (CPU probed in < 1 s, GPUs from the driver)");
  cmd->add_flag("--json", args->json, "Print a JSON array of DeviceProfiles");
  cmd->add_flag("--reference", args->reference,
                "Print the reference cluster's profiles (H100, MI300X, Ascend 910B, T4) instead");
  cmd->callback([args, exit_code] {
    const std::vector<control::DeviceProfile> devices =
        args->reference ? control::ReferenceProfiles() : control::ProbeDevices();
    if (args->json) {
      std::cout << control::ToJson(devices).dump(2) << "\n";
    } else {
      std::cout << control::DevicesTable(devices);
    }
    *exit_code = 0;
  });
}

}  // namespace strata::app

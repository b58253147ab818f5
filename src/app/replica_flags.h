// ReplicaFlags: the command-line face of replica::ReplicaConfig, shared by `strata serve`
// and `strata bench offline`. Each flag is one row: a CLI11 option bound to a staging copy of the
// config, and a small function that copies the value onto the real config.
//
// Resolve() builds the effective config: defaults, then `--config FILE` (the whole tree, YAML),
// then `--kv-tier-config FILE` (the engine.kv_tiers section alone, the older flag), then only the
// flags the user actually passed (CLI11's count()), in registration order; then Validate(), whose
// errors name the key path and its flag. A flag never passed never overrides the file.
//
// Ownership: Register() binds options to members of this object, so it must outlive parsing and
// must not move (hold it in a shared_ptr). Thread contract: CLI parsing thread only.
#pragma once

#include <CLI/CLI.hpp>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "replica/replica_config.h"

namespace strata::app {

class ReplicaFlags {
 public:
  // Which parts of the tree get flags.
  enum Scope : unsigned { kModelPath = 1, kModel = 2, kServer = 4, kEngine = 8 };

  ReplicaFlags() = default;
  ReplicaFlags(const ReplicaFlags&) = delete;
  ReplicaFlags& operator=(const ReplicaFlags&) = delete;

  // Adds --config and the flags of `scopes` to `cmd`.
  void Register(CLI::App* cmd, unsigned scopes);
  // The effective config (see the header comment).
  Result<replica::ReplicaConfig> Resolve() const;
  // Whether the user passed the flag (any of its names, e.g. "--max-queued-requests").
  bool Passed(std::string_view flag) const;

 private:
  struct Row {
    CLI::Option* option = nullptr;
    std::function<Status(replica::ReplicaConfig*)> apply;
  };
  // A flag bound to the staged value `get(staged_)`; passed, it is copied to `get(config)`.
  template <typename V, typename Get>
  void Bind(CLI::App* cmd, const std::string& names, const std::string& help, Get get);
  // A flag whose text `parse` applies to the config (sizes, enums, tier shortcuts).
  void Text(CLI::App* cmd, const std::string& names, const std::string& help,
            std::function<Status(const std::string&, replica::ReplicaConfig*)> parse);
  // A TTL flag of one KV tier: seconds, applied when that tier exists (as the tier flags always
  // did).
  void Ttl(CLI::App* cmd, const std::string& names, const std::string& help,
           engine::kvtier::TierLimits* (*limits)(replica::ReplicaConfig*));
  void AddModel(CLI::App* cmd, unsigned scopes);
  void AddServer(CLI::App* cmd);
  void AddEngine(CLI::App* cmd);
  void AddTiers(CLI::App* cmd);
  void AddLora(CLI::App* cmd, bool server);

  replica::ReplicaConfig staged_;
  std::deque<std::string> texts_;  // values of Text flags (a deque: options point into it)
  std::deque<double> seconds_;     // values of Ttl flags
  std::string config_file_;
  std::string kv_tier_config_file_;
  std::vector<std::string> lora_specs_;  // --lora name=path (repeatable)
  std::vector<Row> rows_;
};

}  // namespace strata::app

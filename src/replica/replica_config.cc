// The ReplicaConfig YAML codec and validation: one table per section (yamlcfg/section_codec.h);
// the `engine:` section's table is engine/serving's (serving_config_keys.h).
#include "replica/replica_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "engine/serving/serving_config_keys.h"
#include "tokenizer/chat/builtin_templates.h"
#include "yamlcfg/section_codec.h"

namespace strata::replica {
namespace {

using engine::serving::kConfigDocument;
using yamlcfg::Check;
using yamlcfg::IntIn;
using yamlcfg::Leaf;
using yamlcfg::NumIn;
using yamlcfg::OneOf;
using yamlcfg::Section;
using yamlcfg::Sub;

const yamlcfg::Codec<std::string> kString = yamlcfg::StringCodec();
const yamlcfg::Codec<std::vector<std::string>> kStringList = yamlcfg::StringListCodec();

// "" or the name of a built-in chat template (tokenizer/chat/builtin_templates.h).
Check<std::string> BuiltinTemplateName() {
  return [](const std::string& v) {
    if (v.empty() || tokenizer::chat::FindBuiltinTemplate(v) != nullptr) return std::string();
    return fmt::format("unknown built-in chat template '{}' (one of: {})", v,
                       tokenizer::chat::BuiltinTemplateNames());
  };
}

constexpr double kMaxSeconds = 1e6;

const Section<ModelFileConfig>& ModelKeys() {
  using M = ModelFileConfig;
  static const Section<M> kKeys = {
      Leaf<M>("path", "--model", &M::path, kString),
      Leaf<M>("served_model_name", "--served-model-name", &M::served_model_name, kString),
      Leaf<M>("chat_template_file", "--chat-template-file", &M::chat_template_file, kString),
      Leaf<M>("chat_template", "--chat-template", &M::chat_template, kString,
              BuiltinTemplateName()),
  };
  return kKeys;
}

const Section<ServerConfig>& ServerKeys() {
  using S = ServerConfig;
  static const Section<S> kKeys = {
      Leaf<S>("host", "--host", &S::host, kString),
      Leaf<S>("port", "--port", &S::port, IntIn<int>(0, 65535)),
      Leaf<S>("api_keys", "--api-key", &S::api_keys, kStringList),
      Leaf<S>("api_key_file", "--api-key-file", &S::api_key_file, kString),
      Leaf<S>("io_threads", "--io-threads", &S::io_threads, IntIn<int>(1, 256)),
      Leaf<S>("max_body_bytes", "--max-body-bytes", &S::max_body_bytes,
              IntIn<uint64_t>(1, uint64_t{1} << 30)),
      Leaf<S>("max_header_bytes", "", &S::max_header_bytes, IntIn<uint32_t>(1024, 1u << 20)),
      Leaf<S>("max_connections", "", &S::max_connections, IntIn<int>(1, 1 << 20)),
      Leaf<S>("idle_timeout_s", "--idle-timeout", &S::idle_timeout_s, NumIn(0.0, kMaxSeconds)),
      Leaf<S>("request_timeout_s", "--request-timeout", &S::request_timeout_s,
              NumIn(0.0, kMaxSeconds)),
      Leaf<S>("shutdown_timeout_s", "--shutdown-timeout", &S::shutdown_timeout_s,
              NumIn(0.0, kMaxSeconds)),
      Leaf<S>("max_tokens_cap", "--max-tokens-cap", &S::max_tokens_cap, IntIn<int>(1, 1 << 24)),
      Leaf<S>("retry_after_s", "", &S::retry_after_s, IntIn<int>(0, 3600)),
      Leaf<S>("metrics_compat", "--metrics-compat", &S::metrics_compat, kString,
              OneOf({"", "vllm"})),
  };
  return kKeys;
}

const Section<TracingConfig>& TracingKeys() {
  using T = TracingConfig;
  static const Section<T> kKeys = {
      Leaf<T>("otlp_endpoint", "--otlp-endpoint", &T::otlp_endpoint, kString),
      Leaf<T>("sample_ratio", "--otlp-sample-ratio", &T::sample_ratio, NumIn(0.0, 1.0)),
      Leaf<T>("service_name", "--otlp-service-name", &T::service_name, kString),
  };
  return kKeys;
}

const Section<ReplicaConfig>& ReplicaKeys() {
  using R = ReplicaConfig;
  static const Section<R> kKeys = {
      Sub<R>("model", &R::model, ModelKeys()),
      Sub<R>("server", &R::server, ServerKeys()),
      Sub<R>("engine", &R::engine, engine::serving::ServingConfigKeys()),
      Sub<R>("tracing", &R::tracing, TracingKeys()),
  };
  return kKeys;
}

}  // namespace

Status ReplicaConfig::Validate() const {
  RETURN_IF_ERROR(yamlcfg::CheckSection(ModelKeys(), model, "model", /*with_flags=*/true));
  if (!model.chat_template.empty() && !model.chat_template_file.empty())
    return Status::InvalidArgument(
        "model.chat_template (--chat-template) and model.chat_template_file "
        "(--chat-template-file): set one of them, not both");
  RETURN_IF_ERROR(yamlcfg::CheckSection(ServerKeys(), server, "server", /*with_flags=*/true));
  RETURN_IF_ERROR(yamlcfg::CheckSection(TracingKeys(), tracing, "tracing", /*with_flags=*/true));
  return engine.Validate();
}

Result<ReplicaConfig> ParseReplicaConfigYaml(std::string_view yaml_text) {
  ReplicaConfig c;
  RETURN_IF_ERROR(yamlcfg::DecodeDocument(yaml_text, kConfigDocument, [&](const YAML::Node& root) {
    return yamlcfg::DecodeSection(ReplicaKeys(), root, "", &c);
  }));
  RETURN_IF_ERROR(c.Validate());
  return c;
}

Result<ReplicaConfig> LoadReplicaConfigFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, yamlcfg::ReadDocumentFile(path, kConfigDocument));
  auto c = ParseReplicaConfigYaml(text);
  if (!c.ok()) return c.status().WithContext(path);
  return c;
}

std::string ReplicaConfigToYaml(const ReplicaConfig& config) {
  YAML::Emitter out;
  out.SetIndent(2);
  yamlcfg::EncodeSection(ReplicaKeys(), config, out);
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> ReplicaConfigKeyPaths() {
  std::vector<std::string> out;
  yamlcfg::SectionPaths(ReplicaKeys(), "", &out);
  return out;
}

}  // namespace strata::replica

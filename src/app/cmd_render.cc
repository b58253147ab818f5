// `strata render k8s -f deploy.yaml -o DIR`: the Kubernetes manifests of a deployment spec
// (src/control/render_k8s.h) written into DIR, one object per file plus kustomization.yaml and
// models.txt (which model file goes where on the models volume). Wiring only: read and parse the
// spec, measure the model files that exist here (the startupProbe's budget), render, write.
// `strata render grafana -o FILE [-f deploy.yaml]`: the Grafana dashboard JSON
// (control/dashboard.h); `strata render rules -f deploy.yaml -o FILE`: the Prometheus rules file
// (control/queries.h RulesYaml). deploy/grafana/strata.json and deploy/prometheus/strata-rules.yml
// are these two for examples/deploy.yaml.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/cli_common.h"
#include "app/commands.h"
#include "control/dashboard.h"
#include "control/queries.h"
#include "control/render_k8s.h"
#include "control/spec.h"

namespace strata::app {
namespace {

struct RenderFlags {
  std::string spec_path;
  std::string out_dir;
  control::RenderOptions opt;
};

Status RunRenderK8s(RenderFlags f) {
  std::ifstream in(f.spec_path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + f.spec_path);
  std::ostringstream text;
  text << in.rdbuf();
  f.opt.spec_yaml = text.str();
  ASSIGN_OR_RETURN(control::DeploymentSpec spec, control::LoadDeploymentSpec(f.spec_path));
  for (const control::PoolSpec& p : spec.pools) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(spec.ModelPath(p), ec);
    if (!ec) f.opt.model_bytes.emplace_back(p.name, static_cast<double>(bytes));
  }
  ASSIGN_OR_RETURN(auto files, control::RenderK8s(spec, f.opt));
  RETURN_IF_ERROR(control::WriteManifests(files, f.out_dir));
  std::printf("strata render k8s: wrote %zu files to %s (apply: kubectl apply -k %s)\n",
              files.size(), f.out_dir.c_str(), f.out_dir.c_str());
  return Status::Ok();
}

struct FileFlags {
  std::string spec_path;  // "" = none (grafana only)
  std::string out_file;
};

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::InvalidArgument("cannot write " + path);
  out << text;
  out.close();
  if (!out) return Status::Internal("writing " + path + " failed");
  return Status::Ok();
}

Status RunRenderGrafana(const FileFlags& f) {
  std::string text;
  if (f.spec_path.empty()) {
    text = control::GrafanaDashboardJson(nullptr);
  } else {
    ASSIGN_OR_RETURN(control::DeploymentSpec spec, control::LoadDeploymentSpec(f.spec_path));
    text = control::GrafanaDashboardJson(&spec);
  }
  RETURN_IF_ERROR(WriteText(f.out_file, text));
  std::printf("strata render grafana: wrote %s (import it in Grafana; pick a Prometheus source)\n",
              f.out_file.c_str());
  return Status::Ok();
}

Status RunRenderRules(const FileFlags& f) {
  ASSIGN_OR_RETURN(control::DeploymentSpec spec, control::LoadDeploymentSpec(f.spec_path));
  RETURN_IF_ERROR(WriteText(f.out_file, control::RulesYaml(spec)));
  std::printf("strata render rules: wrote %s (a Prometheus rule_files entry)\n",
              f.out_file.c_str());
  return Status::Ok();
}

void RegisterFileRender(CLI::App* render, int* exit_code) {
  auto g = std::make_shared<FileFlags>();
  CLI::App* c = render->add_subcommand(
      "grafana", "the Grafana dashboard JSON (the queries of the autoscaler and the rules)");
  c->add_option("-f,--file", g->spec_path,
                "deployment spec: its SLO objectives and name (default: every objective)");
  c->add_option("-o,--out", g->out_file, "output file (replaced)")->required();
  c->callback(
      [g, exit_code] { ReportError(RunRenderGrafana(*g), "strata render grafana", exit_code); });
  auto r = std::make_shared<FileFlags>();
  CLI::App* rc = render->add_subcommand(
      "rules", "the Prometheus rules file (recording rules, SLO objectives, burn-rate alerts)");
  rc->add_option("-f,--file", r->spec_path, "deployment spec (examples/deploy.yaml)")->required();
  rc->add_option("-o,--out", r->out_file, "output file (replaced)")->required();
  rc->callback(
      [r, exit_code] { ReportError(RunRenderRules(*r), "strata render rules", exit_code); });
}

}  // namespace

void RegisterRender(CLI::App& app, int* exit_code) {
  CLI::App* render = app.add_subcommand("render", "render a deployment spec for another platform");
  render->require_subcommand(1);
  auto f = std::make_shared<RenderFlags>();
  CLI::App* c = render->add_subcommand(
      "k8s",
      "Kubernetes manifests (Deployments, Services, KEDA ScaledObjects, ServiceMonitors, "
      "a PrometheusRule, kustomization.yaml)");
  c->add_option("-f,--file", f->spec_path, "deployment spec (examples/deploy.yaml)")->required();
  c->add_option("-o,--out", f->out_dir, "output folder (created; files are replaced)")->required();
  AddDefaulted(c, "--image", f->opt.image, "container image with /usr/bin/strata (deploy/image)");
  AddDefaulted(c, "--image-pull-policy", f->opt.image_pull_policy, "IfNotPresent | Always | Never")
      ->check(CLI::IsMember({"IfNotPresent", "Always", "Never"}));
  c->add_option("--namespace", f->opt.namespace_name,
                "namespace of every object (default: kubectl's current one)");
  AddDefaulted(c, "--models-claim", f->opt.models_claim,
               "PersistentVolumeClaim holding the model files (mounted read-only at /models)");
  AddDefaulted(c, "--prometheus", f->opt.prometheus_url,
               "Prometheus URL the autoscaler and KEDA's triggers query");
  AddDefaulted(c, "--gpu-resource", f->opt.gpu_resource,
               "extended resource name of a pool's devices.gpus");
  RegisterFileRender(render, exit_code);
  c->callback([f, exit_code] { ReportError(RunRenderK8s(*f), "strata render k8s", exit_code); });
}

}  // namespace strata::app

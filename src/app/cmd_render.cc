// `strata render k8s -f deploy.yaml -o DIR`: the Kubernetes manifests of a deployment spec
// (src/control/render_k8s.h) written into DIR, one object per file plus kustomization.yaml and
// models.txt (which model file goes where on the models volume). Wiring only: read and parse the
// spec, measure the model files that exist here (the startupProbe's budget), render, write.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/commands.h"
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
  c->add_option("--image", f->opt.image, "container image with /usr/bin/strata (deploy/image)")
      ->capture_default_str();
  c->add_option("--image-pull-policy", f->opt.image_pull_policy, "IfNotPresent | Always | Never")
      ->check(CLI::IsMember({"IfNotPresent", "Always", "Never"}))
      ->capture_default_str();
  c->add_option("--namespace", f->opt.namespace_name,
                "namespace of every object (default: kubectl's current one)");
  c->add_option("--models-claim", f->opt.models_claim,
                "PersistentVolumeClaim holding the model files (mounted read-only at /models)")
      ->capture_default_str();
  c->add_option("--prometheus", f->opt.prometheus_url,
                "Prometheus URL the autoscaler and KEDA's triggers query")
      ->capture_default_str();
  c->add_option("--gpu-resource", f->opt.gpu_resource,
                "extended resource name of a pool's devices.gpus")
      ->capture_default_str();
  c->callback([f, exit_code] {
    Status s = RunRenderK8s(*f);
    if (!s.ok()) {
      std::fprintf(stderr, "strata render k8s: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace strata::app

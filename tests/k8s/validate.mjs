// Validates the output folder of `strata render k8s` against the Kubernetes, KEDA and
// prometheus-operator schemas (kubernetes-models' generated validators), file by file.
//   node validate.mjs DIR [--rules OUT.json]
// Every *.yaml file but kustomization.yaml must hold exactly one object of a known apiVersion/kind
// that validates; kustomization.yaml must list exactly those files. With --rules, the
// PrometheusRule's spec ({groups: [...]}) is written to OUT.json for `promtool check rules`.
// Prints a JSON summary {"objects": [{"file", "kind", "name"}]} on success; exits 1 naming the
// file and the schema error otherwise.
import fs from "node:fs";
import path from "node:path";
import yaml from "js-yaml";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Service } from "kubernetes-models/v1/Service";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";

const kModels = new Map([
  ["v1/ConfigMap", ConfigMap],
  ["v1/Service", Service],
  ["apps/v1/Deployment", Deployment],
  ["keda.sh/v1alpha1/ScaledObject", ScaledObject],
  ["monitoring.coreos.com/v1/ServiceMonitor", ServiceMonitor],
  ["monitoring.coreos.com/v1/PrometheusRule", PrometheusRule],
]);

function fail(msg) {
  process.stderr.write(`validate: ${msg}\n`);
  process.exit(1);
}

const args = process.argv.slice(2);
const dir = args[0];
if (!dir) fail("usage: node validate.mjs DIR [--rules OUT.json]");
const rulesOut = args[1] === "--rules" ? args[2] : undefined;

const files = fs.readdirSync(dir).filter(f => f.endsWith(".yaml") && f !== "kustomization.yaml").sort();
if (!files.length) fail(`no manifests in ${dir}`);
const objects = [];
let rules;
for (const file of files) {
  const docs = yaml.loadAll(fs.readFileSync(path.join(dir, file), "utf8"));
  if (docs.length !== 1) fail(`${file}: ${docs.length} documents, want 1`);
  const obj = docs[0];
  const key = `${obj.apiVersion}/${obj.kind}`;
  const Model = kModels.get(key);
  if (!Model) fail(`${file}: unexpected ${key}`);
  try {
    new Model(obj).validate();
  } catch (e) {
    fail(`${file} (${key}): ${e.message}`);
  }
  if (!obj.metadata || typeof obj.metadata.name !== "string") fail(`${file}: no metadata.name`);
  objects.push({file, kind: obj.kind, name: obj.metadata.name});
  if (obj.kind === "PrometheusRule") rules = obj.spec;
}

const kust = yaml.load(fs.readFileSync(path.join(dir, "kustomization.yaml"), "utf8"));
if (kust.apiVersion !== "kustomize.config.k8s.io/v1beta1" || kust.kind !== "Kustomization")
  fail("kustomization.yaml: not a kustomize.config.k8s.io/v1beta1 Kustomization");
const listed = [...(kust.resources || [])].sort();
if (JSON.stringify(listed) !== JSON.stringify(files))
  fail(`kustomization.yaml lists ${JSON.stringify(listed)}, the folder has ${JSON.stringify(files)}`);

if (rulesOut) {
  if (!rules) fail("no PrometheusRule");
  fs.writeFileSync(rulesOut, JSON.stringify(rules, null, 2));
}
process.stdout.write(JSON.stringify({objects}) + "\n");

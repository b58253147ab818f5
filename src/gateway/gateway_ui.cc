// The status page's data (/ui/data), its HTML (/ui) and the StatusPage that serves them and
// fetches the control plane's status (ui.control_url).
#include "gateway/gateway_ui.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "gateway/gateway_services.h"
#include "http/client.h"

namespace strata::gateway {

using nlohmann::json;

namespace {

constexpr std::string_view kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Strata gateway</title>
<style>
:root { --bg:#f6f7f9; --card:#fff; --ink:#1d2330; --mute:#6b7385; --ok:#1a8f4c; --warn:#c98a00;
        --bad:#c0392b; --line:#2f6fdb; --line2:#a347c9; --line3:#1a8f4c; }
* { box-sizing:border-box; }
body { margin:0; font:14px/1.4 system-ui, sans-serif; background:var(--bg); color:var(--ink); }
header { display:flex; gap:16px; align-items:baseline; padding:12px 20px; background:#1d2330;
         color:#fff; }
header h1 { font-size:18px; margin:0; }
header span { color:#c9cfdb; }
main { padding:16px 20px; display:grid; gap:16px; }
section h2 { font-size:15px; margin:0 0 8px; }
.pools { display:grid; gap:16px; grid-template-columns:repeat(auto-fill, minmax(420px, 1fr)); }
.card { background:var(--card); border-radius:8px; padding:12px 14px;
        box-shadow:0 1px 2px rgba(0,0,0,.08); }
.card h3 { margin:0 0 4px; font-size:15px; display:flex; gap:8px; align-items:center; }
.badge { font-size:12px; padding:1px 7px; border-radius:9px; background:#e8ebf1; color:var(--ink); }
.badge.ok { background:#dff3e7; color:var(--ok); } .badge.bad { background:#f8e0dd; color:var(--bad); }
.badge.warn { background:#fbf0d5; color:var(--warn); }
.labels { color:var(--mute); font-size:12px; margin-bottom:6px; }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { text-align:left; padding:3px 6px; border-bottom:1px solid #eceef2; white-space:nowrap; }
th { color:var(--mute); font-weight:600; }
td.num { text-align:right; font-variant-numeric:tabular-nums; }
svg.chart { width:100%; height:90px; background:#fafbfc; border:1px solid #eceef2; border-radius:4px; }
.legend { font-size:12px; color:var(--mute); display:flex; gap:12px; margin:2px 0 6px; }
.legend i { display:inline-block; width:10px; height:3px; margin-right:4px; vertical-align:middle; }
#control-table { width:auto; min-width:60%; }
#control-table td { white-space:normal; }
.muted { color:var(--mute); }
.error { color:var(--bad); }
</style>
</head>
<body data-loaded="0">
<header><h1>Strata gateway</h1><span id="gen"></span><span id="updated"></span></header>
<main>
  <section><h2>Pools</h2><div class="pools" id="pools"></div></section>
  <section class="card"><h2>Autoscaler and SLOs</h2><div id="control"></div></section>
  <section class="card"><h2>Canaries</h2><div id="canaries"></div></section>
  <section class="card"><h2>Routes</h2><div id="routes"></div></section>
</main>
<script>
"use strict";
const kPoints = 90;           // samples kept per chart (2 s apart: 3 minutes)
const history = new Map();    // pool -> {load:[], ready:[], desired:[]}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, String(v));
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function num(v, digits) {
  if (typeof v !== "number" || !isFinite(v)) return "–";
  return digits === undefined ? String(v) : v.toFixed(digits);
}
function push(arr, v) { arr.push(v); if (arr.length > kPoints) arr.shift(); }
function series(pool) {
  if (!history.has(pool)) history.set(pool, {load: [], ready: [], desired: []});
  return history.get(pool);
}

// A small line chart: each series an SVG polyline over the same y scale.
function chart(lines) {
  const w = 400, h = 90, pad = 4;
  const svgNs = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNs, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("preserveAspectRatio", "none");
  let max = 1;
  for (const l of lines) for (const v of l.values) if (typeof v === "number" && v > max) max = v;
  // The x scale fills up to kPoints samples; a young chart spans at least 30.
  const span = Math.max(30, ...lines.map(l => l.values.length)) - 1;
  for (const l of lines) {
    const pts = [];
    l.values.forEach((v, i) => {
      if (typeof v !== "number") return;
      const x = pad + (w - 2 * pad) * (i / span);
      const y = h - pad - (h - 2 * pad) * (v / max);
      pts.push(`${x.toFixed(1)},${y.toFixed(1)}`);
    });
    const p = document.createElementNS(svgNs, "polyline");
    p.setAttribute("points", pts.join(" "));
    p.setAttribute("fill", "none");
    p.setAttribute("stroke", l.color);
    p.setAttribute("stroke-width", "2");
    p.setAttribute("data-series", l.name);
    svg.append(p);
  }
  const t = document.createElementNS(svgNs, "text");
  t.setAttribute("x", w - 6); t.setAttribute("y", 14); t.setAttribute("text-anchor", "end");
  t.setAttribute("font-size", "11"); t.setAttribute("fill", "#6b7385");
  t.textContent = `max ${max}`;
  svg.append(t);
  return svg;
}

function replicaState(r) {
  if (r.eligible) return ["ready", "ok"];
  if (r.draining) return ["draining", "warn"];
  if (r.ejected) return ["ejected", "bad"];
  return [r.healthy ? "not eligible" : "unhealthy", "bad"];
}

// The control plane's pool objects by name (`pool` or `name`), whatever else they carry.
function controlPools(control) {
  const out = new Map();
  const list = control && Array.isArray(control.pools) ? control.pools : [];
  for (const p of list) {
    if (!p || typeof p !== "object") continue;
    const name = typeof p.pool === "string" ? p.pool : p.name;
    if (typeof name === "string") out.set(name, p);
  }
  return out;
}
function desiredOf(p) {
  if (!p) return undefined;
  for (const v of [p.desired, p.decision && p.decision.desired,
                   p.last_decision && p.last_decision.desired,
                   p.autoscaler && p.autoscaler.desired]) {
    if (typeof v === "number") return v;
  }
  return undefined;
}

function renderPools(d, ctl) {
  const root = document.getElementById("pools");
  root.replaceChildren();
  for (const p of d.pools) {
    const s = series(p.name);
    let load = 0;
    for (const r of p.replicas) load += (r.running || 0) + (r.waiting || 0);
    push(s.load, Math.max(load, p.in_flight));
    push(s.ready, p.eligible);
    push(s.desired, desiredOf(ctl.get(p.name)));
    const cls = p.eligible > 0 ? "ok" : (p.replicas.length ? "bad" : "warn");
    const labels = Object.entries(p.labels || {}).map(([k, v]) => `${k}=${v}`).join("  ");
    const rows = p.replicas.map(r => {
      const [state, c] = replicaState(r);
      return el("tr", {class: "replica", "data-url": r.url, "data-eligible": r.eligible},
                el("td", {}, r.url), el("td", {}, el("span", {class: "badge " + c}, state)),
                el("td", {class: "num"}, num(r.in_flight)),
                el("td", {class: "num"}, r.metrics_valid ? num(r.running) : "–"),
                el("td", {class: "num"}, r.metrics_valid ? num(r.waiting) : "–"),
                el("td", {class: "num"}, r.metrics_valid ? num(100 * r.kv_usage, 0) + "%" : "–"),
                el("td", {class: "num"}, num(r.ejections)));
    });
    const table = rows.length
        ? el("table", {}, el("tr", {}, el("th", {}, "replica"), el("th", {}, "state"),
                             el("th", {}, "in flight"), el("th", {}, "running"),
                             el("th", {}, "waiting"), el("th", {}, "KV"),
                             el("th", {}, "ejections")), ...rows)
        : el("p", {class: "muted"}, "no replicas (scaled to zero?)");
    root.append(el("div", {class: "card pool", "data-pool": p.name},
        el("h3", {}, p.name,
           el("span", {class: "badge " + cls, "data-ready": p.eligible},
              `${p.eligible}/${p.replicas.length} ready`),
           el("span", {class: "badge"}, `${p.in_flight} in flight`)),
        el("div", {class: "labels"}, labels),
        chart([{name: "load", color: "var(--line)", values: s.load},
               {name: "ready", color: "var(--line3)", values: s.ready},
               {name: "desired", color: "var(--line2)", values: s.desired}]),
        el("div", {class: "legend"},
           el("span", {}, el("i", {style: "background:var(--line)"}), "load (running + waiting)"),
           el("span", {}, el("i", {style: "background:var(--line3)"}), "ready replicas"),
           el("span", {}, el("i", {style: "background:var(--line2)"}), "desired (autoscaler)")),
        table));
  }
}

// An SLO objective ({target, measured, met}, as `strata up` reports them) as one cell's text.
function objective(o) {
  const verdict = o.met === true ? "met" : o.met === false ? "BREACHED" : "no data";
  const m = typeof o.measured === "number" ? o.measured.toPrecision(3) : "–";
  return `${m} / ${num(o.target)} ${verdict}`;
}
// One level of a control pool object flattened to "key" / "parent.key" scalar cells (an SLO
// objective one level further down is one cell: "measured / target verdict").
function flatten(obj) {
  const out = [];
  for (const [k, v] of Object.entries(obj)) {
    if (v === null || typeof v !== "object") { out.push([k, v]); continue; }
    if (Array.isArray(v)) { out.push([k, `${v.length} items`]); continue; }
    for (const [k2, v2] of Object.entries(v)) {
      if (v2 === null || typeof v2 !== "object") out.push([`${k}.${k2}`, v2]);
      else if (!Array.isArray(v2) && "target" in v2) out.push([`${k}.${k2}`, objective(v2)]);
    }
  }
  return out;
}
function cell(v) {
  if (typeof v === "number") return el("td", {class: "num"}, Number.isInteger(v) ? v : v.toPrecision(3));
  return el("td", {}, v === null || v === undefined ? "–" : String(v));
}

function renderControl(d) {
  const root = document.getElementById("control");
  root.replaceChildren();
  if (!d.control_url) {
    root.append(el("p", {class: "muted"},
        "No control plane configured (gateway config ui.control_url)."));
    return;
  }
  const age = typeof d.control_age_s === "number" ? ` (${d.control_age_s.toFixed(0)} s ago)` : "";
  root.append(el("p", {class: "muted"}, `from ${d.control_url}${age}`));
  if (d.control_error) root.append(el("p", {class: "error"}, d.control_error));
  const pools = d.control && Array.isArray(d.control.pools) ? d.control.pools : [];
  if (!pools.length) { root.append(el("p", {class: "muted"}, "no pools reported yet")); return; }
  // One column per pool, one row per field (a pool's object is wide): the name, counts and the
  // SLO verdict first, then every other field in the order the objects give them.
  const rows = pools.map(p => new Map(flatten(p)));
  const keys = [];
  for (const k of ["desired", "ready", "slo_met"]) if (rows.some(r => r.has(k))) keys.push(k);
  for (const r of rows) for (const k of r.keys()) if (!keys.includes(k)) keys.push(k);
  const names = pools.map(p => p.pool || p.name || "");
  root.append(el("table", {id: "control-table"},
      el("tr", {}, el("th", {}, "pool"),
         ...names.map(n => el("th", {class: "control-pool", "data-pool": n}, n))),
      ...keys.filter(k => k !== "name" && k !== "pool").map(k =>
          el("tr", {"data-key": k}, el("th", {}, k), ...rows.map(r => cell(r.get(k)))))));
}

function renderCanaries(d) {
  const root = document.getElementById("canaries");
  root.replaceChildren();
  if (!d.canaries.length) { root.append(el("p", {class: "muted"}, "no canary routes")); return; }
  root.append(el("table", {},
      el("tr", {}, ...["route", "baseline", "canary", "state", "step", "weight"].map(h => el("th", {}, h))),
      ...d.canaries.map(c => el("tr", {class: "canary", "data-route": c.route},
          el("td", {}, c.route), el("td", {}, c.baseline), el("td", {}, c.canary),
          el("td", {}, c.state), el("td", {class: "num"}, `${c.step}/${c.steps.length}`),
          el("td", {class: "num"}, num(c.weight, 1) + "%")))));
}

function renderRoutes(d) {
  const root = document.getElementById("routes");
  root.replaceChildren(el("table", {},
      el("tr", {}, el("th", {}, "route"), el("th", {}, "pools")),
      ...d.routes.map(r => el("tr", {class: "route", "data-route": r.name},
          el("td", {}, r.name), el("td", {}, r.pools.join(", "))))));
}

async function tick() {
  try {
    const resp = await fetch("/ui/data", {cache: "no-store"});
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    const d = await resp.json();
    const ctl = controlPools(d.control);
    renderPools(d, ctl);
    renderControl(d);
    renderCanaries(d);
    renderRoutes(d);
    document.getElementById("gen").textContent =
        `config generation ${d.generation}${d.draining ? " · draining" : ""}`;
    document.getElementById("updated").textContent =
        "updated " + new Date(d.time_s * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded) + 1);
  } catch (e) {
    document.getElementById("updated").textContent = "update failed: " + e.message;
  }
}
tick();
setInterval(tick, 2000);
</script>
</body>
</html>
)html";

json ReplicaJson(const ReplicaView& v) {
  return {{"url", v.url},
          {"eligible", v.eligible},
          {"healthy", v.healthy},
          {"draining", v.draining},
          {"ejected", v.ejected},
          {"in_flight", v.in_flight},
          {"running", v.metrics.running},
          {"waiting", v.metrics.waiting},
          {"kv_usage", v.metrics.kv_usage},
          {"metrics_valid", v.metrics.valid},
          {"ejections", v.ejections}};
}

}  // namespace

std::string_view UiHtml() { return kPage; }

json UiPoolsJson(const Snapshot& snap, const Admission& admission) {
  json pools = json::array();
  for (const PoolConfig& pc : snap.cfg->pools) {
    json replicas = json::array();
    int eligible = 0;
    auto it = snap.pools.find(pc.name);
    if (it != snap.pools.end()) {
      for (const ReplicaView& v : it->second->Snapshot()) {
        eligible += v.eligible ? 1 : 0;
        replicas.push_back(ReplicaJson(v));
      }
    }
    pools.push_back({{"name", pc.name},
                     {"labels", pc.labels},
                     {"in_flight", admission.in_flight(pc.name)},
                     {"eligible", eligible},
                     {"replicas", std::move(replicas)}});
  }
  return pools;
}

json UiRoutesJson(const GatewayConfig& cfg) {
  json routes = json::array();
  for (const RouteConfig& r : cfg.routes) {
    json pools = json::array();
    for (std::string_view p : r.ReferencedPools()) pools.push_back(std::string(p));
    routes.push_back({{"name", r.name}, {"pools", std::move(pools)}});
  }
  return routes;
}

json UiCanariesJson(const std::vector<CanaryView>& canaries) {
  json list = json::array();
  for (const CanaryView& v : canaries)
    list.push_back({{"route", v.route},
                    {"baseline", v.baseline},
                    {"canary", v.canary},
                    {"state", CanaryStateName(v.state)},
                    {"step", v.step},
                    {"steps", v.steps},
                    {"weight", v.weight}});
  return list;
}

json UiControlJson(const ControlStatus& status, std::string_view url,
                   std::chrono::steady_clock::time_point now) {
  json control = nullptr;
  std::string error = status.error;
  if (!status.body.empty()) {
    control = json::parse(status.body, nullptr, /*allow_exceptions=*/false);
    if (control.is_discarded()) {
      control = nullptr;
      if (error.empty()) error = "the control plane's answer is not JSON";
    }
  }
  json age = nullptr;
  if (!status.body.empty()) age = std::chrono::duration<double>(now - status.at).count();
  return {{"control", std::move(control)},
          {"control_url", url},
          {"control_error", error},
          {"control_age_s", std::move(age)}};
}

// ---- StatusPage ----

http::HttpResponse StatusPage::Page(http::Exchange&) {
  http::HttpResponse r;
  r.content_type = "text/html; charset=utf-8";
  r.body = std::string(UiHtml());
  return r;
}

http::HttpResponse StatusPage::Data(http::Exchange&) {
  auto snap = snaps_->current();
  json d = {
      {"generation", snap->generation},
      {"draining", readiness_->draining()},
      {"time_s",
       std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
      {"pools", UiPoolsJson(*snap, *sv_->admission)},
      {"routes", UiRoutesJson(*snap->cfg)},
      {"canaries", UiCanariesJson(sv_->canary->List(Clock::now()))}};
  json control;
  {
    MutexLock lock(&mu_);
    control = UiControlJson(control_status_, snap->cfg->ui.control_url, Clock::now());
  }
  for (auto& [k, v] : control.items()) d[k] = std::move(v);
  http::HttpResponse r;
  r.body = d.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

void StatusPage::RefreshControl() {
  const std::string url_text = snaps_->current()->cfg->ui.control_url;
  if (url_text.empty()) return;
  auto url = http::ParseUrl(url_text);
  if (!url.ok()) return;  // validated by the config parser
  boost::asio::co_spawn(
      sv_->upstreams->io(),
      [this, url = *url]() -> boost::asio::awaitable<void> {
        http::HttpClient client(sv_->upstreams->io(), url, "");
        std::string body;
        auto res = co_await client.Request(
            "GET", url.path_prefix.empty() ? "/" : "", "", Clock::now() + std::chrono::seconds(2),
            [&body](std::string_view piece) {
              if (body.size() + piece.size() > kMaxControlStatusBytes)
                return Status::OutOfRange("the control plane's status is over 1 MiB");
              body.append(piece);
              return Status::Ok();
            });
        MutexLock lock(&mu_);
        if (!res.status.ok()) {
          control_status_.error = "control plane: " + res.status.message();
        } else if (res.http_status != 200) {
          control_status_.error = "control plane: HTTP " + std::to_string(res.http_status);
        } else {
          control_status_.error.clear();
          control_status_.body = std::move(body);
          control_status_.at = Clock::now();
        }
      },
      boost::asio::detached);
}

}  // namespace strata::gateway

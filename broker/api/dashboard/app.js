// gpufed dashboard: plain JavaScript over the broker's HTTP API (no build step, no CDN).
// Polls /v1/fleet, /v1/clusters and /v1/jobs (paged, listAll) every few seconds; a job's timeline from
// /v1/jobs/{id}/events. The token (if any) is kept in localStorage and sent as a Bearer token.
"use strict";

const POLL_MS = 3000;
const MAX_NODE_ROWS = 200;
const TOKEN_KEY = "gpufed.token";
const state = { jobs: [], fleet: null, clusters: [], selected: null, showNodes: false };

function $(sel) { return document.querySelector(sel); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

async function api(path) {
  const headers = { Accept: "application/json" };
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  const r = await fetch(path, { headers });
  if (r.status === 401 && !token) {
    // nothing typed yet: a prompt, not an error
    const e = new Error("this broker asks for an API token: enter it above");
    e.needsToken = true;
    throw e;
  }
  if (r.status === 401 || r.status === 403) throw new Error("the broker refused the token (" + r.status + ")");
  if (!r.ok) {
    let msg = r.statusText;
    try { msg = (await r.json()).message || msg; } catch (e) { /* not JSON */ }
    throw new Error(path + ": " + r.status + " " + msg);
  }
  return r.json();
}

// A paged list walked to its end, CHUNK items a request, following metadata.continue (as kubectl's
// --chunk-size): each page's cost on the broker stays the same however many jobs it holds.
const CHUNK = 500;
async function listAll(path) {
  const items = [];
  let token = "";
  do {
    const sep = path.includes("?") ? "&" : "?";
    const page = await api(path + sep + "limit=" + CHUNK + (token ? "&continue=" + encodeURIComponent(token) : ""));
    items.push(...page.items);
    token = (page.metadata && page.metadata.continue) || "";
  } while (token);
  return { items };
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "never";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  return (s / 3600).toFixed(1) + " h ago";
}

function since(epoch) { return ago(Date.now() / 1000 - epoch); }

function healthWhy(health, age) {
  switch (health) {
    case "healthy": return "watched live; last summary " + ago(age);
    case "degraded": return "some watches failing or slow; last good summary " + ago(age);
    case "stale": return "no fresh observation: last summary " + ago(age) + ", placement skips it";
    case "unreachable": return "the API server does not answer; last summary " + ago(age);
    case "forbidden": return "credentials refused (401/403): rotate the kubeconfig token";
    default: return "no summary from the pollers yet";
  }
}

// ------------------------------------------------------------------------------------------ fleet

function bar(parts, total, label) {
  // parts: [{cls, value, name}]; a horizontal stacked bar with a text label for screen readers
  const wrap = el("div", { class: "bar", role: "img", "aria-label": label });
  for (const p of parts) {
    if (!p.value) continue;
    const pct = total > 0 ? (100 * p.value) / total : 0;
    wrap.append(el("span", { class: "seg " + p.cls, style: "width:" + pct.toFixed(2) + "%", title: p.name + ": " + p.value }));
  }
  return wrap;
}

function histogram(counts, title) {
  // counts[k] = nodes (or domains) with k free: a one-row heatmap, darker = more nodes
  const max = Math.max(1, ...counts);
  const row = el("div", { class: "heat", role: "img",
    "aria-label": title + ": " + counts.map((n, k) => n ? n + " with " + k + " free" : null).filter(Boolean).join(", ") });
  counts.forEach((n, k) => {
    const level = n === 0 ? 0 : Math.min(4, 1 + Math.floor((3 * n) / max));
    row.append(el("span", { class: "cell l" + level, title: n + " with " + k + " free" }, String(k)));
  });
  return el("div", { class: "hist" }, el("span", { class: "hist-label" }, title), row);
}

function renderProducts(products) {
  const body = $("#products tbody");
  body.replaceChildren();
  for (const p of products) {
    body.append(el("tr", {},
      el("th", { scope: "row" }, p.product),
      el("td", {}, bar([{ cls: "used", value: p.allocatable - p.free, name: "in use" }, { cls: "free", value: p.free, name: "free" }],
        p.allocatable, p.free + " of " + p.allocatable + " free"), el("span", { class: "num" }, p.free + " / " + p.allocatable)),
      el("td", { class: "num" }, String(p.sharedFree)),
      el("td", { class: "num" }, String(p.migFree)),
      el("td", { class: "num" + (p.queued > p.free + p.migFree ? " warn" : "") }, String(p.queued))));
  }
  if (!products.length) body.append(el("tr", {}, el("td", { colspan: 5 }, "No capacity reported yet.")));
}

// a cluster placement does not use: its capacity is only what it last reported, never shown as free
const NOT_PLACEABLE = ["forbidden", "unreachable", "stale", "unknown"];

function clusterCard(c) {
  const lost = NOT_PLACEABLE.includes(c.health);
  const freeCls = lost ? "lost" : "free";
  const card = el("article", { class: "card" + (lost ? " lost" : ""), "aria-labelledby": "c-" + c.cluster });
  card.append(el("h3", { id: "c-" + c.cluster }, c.cluster, " ",
    el("span", { class: "badge h-" + c.health }, c.health), " ",
    el("span", { class: "meta" }, c.tier + (c.region ? " · " + c.region : "") + " · nodes " + c.nodes.ready + "/" + c.nodes.total + " ready")));
  if (lost) card.append(el("p", { class: "warn lost-note" }, "Not offered to placement (" + c.health + "): the figures below are what it last reported."));
  for (const p of c.products) {
    const used = p.allocated;
    card.append(el("div", { class: "prod" },
      el("div", { class: "prod-h" }, el("strong", {}, p.product), " ", el("span", { class: "num" }, p.free + " / " + p.allocatable + " free"),
        p.pricePerGpuHour !== null && p.pricePerGpuHour !== undefined ? el("span", { class: "meta" }, " · $" + p.pricePerGpuHour.toFixed(2) + "/GPU-h") : null),
      bar([{ cls: "used", value: used, name: "in use" }, { cls: freeCls, value: p.free, name: lost ? "last known free" : "free" }], Math.max(p.allocatable, used + p.free),
        p.product + " on " + c.cluster + ": " + p.free + " of " + p.allocatable + " GPUs " + (lost ? "free when last seen (" + c.health + ")" : "free")),
      p.sharedAllocatable ? el("div", { class: "sub-row" }, "time-sliced: ",
        bar([{ cls: "shared", value: p.sharedFree, name: "shared free" }, { cls: "used", value: p.sharedAllocatable - p.sharedFree, name: "in use" }],
          p.sharedAllocatable, p.sharedFree + " of " + p.sharedAllocatable + " shared replicas free"),
        el("span", { class: "num" }, p.sharedFree + " / " + p.sharedAllocatable)) : null,
      (p.singleNumaNodeFree || 0) > p.maxFreeOnOneNode
        ? el("p", { class: "meta numa-note" }, "topology policy single-numa-node: a pod's GPUs must share one NUMA zone (" +
            p.singleNumaNodeFree + " free on one node, at most " + p.maxFreeOnOneNode + " in one zone)")
        : null,
      // nodes as a person counts them; under single-numa-node a node's zones are separate slots for a pod
      histogram(p.nodesByNodeFree && p.nodesByNodeFree.length ? p.nodesByNodeFree : p.nodesByFree, "nodes by free GPUs"),
      (p.singleNumaNodeFree || 0) > 0 ? histogram(p.nodesByFree, "pod slots (NUMA zones) by free GPUs") : null,
      p.numaBlocks.some((n) => n) ? histogram(p.numaBlocks, "largest free block in one NUMA zone") : null));
  }
  // NVLink cliques (GB200/GB300 NVL72 racks, docs/topology.md): one strip per clique, free nodes of its nodes
  for (const q of (c.cliques || [])) {
    const id = q.clique.length > 16 ? q.clique.slice(0, 8) + "…" + q.clique.slice(q.clique.lastIndexOf(".")) : q.clique;
    card.append(el("div", { class: "sub-row clique", title: q.clique }, "NVLink " + id + " (" + q.product + "): ",
      bar([{ cls: freeCls, value: q.freeNodes, name: "free nodes" }, { cls: "used", value: q.nodes - q.freeNodes, name: "busy nodes" }],
        Math.max(1, q.nodes), q.freeNodes + " of " + q.nodes + " nodes free in NVLink clique " + q.clique),
      el("span", { class: "num" }, q.freeNodes + " / " + q.nodes + " nodes free")));
  }
  for (const m of c.mig) {
    card.append(el("div", { class: "prod mig" },
      el("div", { class: "prod-h" }, el("strong", {}, m.product + " MIG " + m.profile), " ",
        el("span", { class: "num" }, m.free + " / " + m.allocatable + " slices free"),
        m.settled ? null : el("span", { class: "badge h-degraded" }, "reconfiguring")),
      bar([{ cls: "used", value: m.allocatable - m.free, name: "in use" }, { cls: "mig", value: m.free, name: "free" }], m.allocatable,
        m.profile + " on " + c.cluster + ": " + m.free + " of " + m.allocatable + " slices free")));
  }
  for (const q of c.queues.filter((q) => q.resource.startsWith("nvidia.com/"))) {
    card.append(el("p", { class: "meta" }, "Kueue " + q.clusterQueue + "/" + q.flavor + ": " + q.headroom + " of " + q.nominal + " " + q.resource + " headroom"));
  }
  if (!c.products.length && !c.mig.length) card.append(el("p", { class: "meta" }, "no GPU nodes"));
  const gh = c.gpuHealth;
  if (gh && gh.unhealthyGpus) card.append(el("p", { class: "meta warn" }, gh.unhealthyGpus + " GPU(s) unhealthy"));
  if (gh && gh.breakerOpen) card.append(el("p", { class: "warn", role: "alert" }, "GPU " + gh.breakerReason));
  return card;
}

// Which GPU of a node is unhealthy, why and since when (docs/health.md); "healthy" when none.
function gpuHealthText(n) {
  const lines = (n.gpuFaults || []).map((f) =>
    (f.gpu === null ? "node" : "GPU " + f.gpu) + " " + f.state + ": " + f.reason +
    " since " + new Date(f.since * 1000).toISOString().replace(".000", "") +
    (f.quarantined ? "" : " (not quarantined: circuit breaker)"));
  if (n.quarantined) lines.push("node quarantined: " + n.quarantined);
  return lines.join("; ") || "healthy";
}

function renderNodes(clusters) {
  const wrap = $("#nodes");
  wrap.replaceChildren();
  if (!state.showNodes) return;
  for (const c of clusters) {
    const d = c.nodeDetail;
    const sec = el("section", { class: "node-sec", "aria-labelledby": "n-" + c.cluster });
    sec.append(el("h3", { id: "n-" + c.cluster }, c.cluster + ": GPU nodes", d ? el("span", { class: "meta" }, " (table written " + ago(d.ageSeconds) + ")") : null));
    if (!d) { sec.append(el("p", { class: "meta" }, "No node table yet: the pollers write one every few seconds.")); wrap.append(sec); continue; }
    const grid = el("div", { class: "nodegrid", role: "list", "aria-label": "nodes of " + c.cluster + " by free GPUs" });
    const table = el("table", { class: "grid compact" },
      el("caption", {}, "Per-node detail of " + c.cluster),
      el("thead", {}, el("tr", {}, ...["Node", "Product", "Whole free", "MIG free", "Time-sliced free", "NUMA free/alloc", "Taints", "Offers", "GPU health"].map((h) => el("th", { scope: "col" }, h)))));
    const tbody = el("tbody");
    let rows = 0;
    for (const n of d.items) {
      const migFree = n.mig.reduce((a, m) => a + m.free, 0);
      const cap = n.wholeAllocatable || n.mig.reduce((a, m) => a + m.allocatable, 0) || n.sharedAllocatable || 1;
      const free = n.wholeFree || migFree || n.sharedFree;
      const level = n.offersNothing ? 0 : Math.min(4, 1 + Math.floor((3 * free) / cap));
      const text = n.name + ": " + (n.offersNothing || (free + " free"));
      grid.append(el("span", { class: "ncell l" + level + (n.offersNothing ? " none" : ""), role: "listitem", title: text, "aria-label": text }));
      if (++rows > MAX_NODE_ROWS) continue;  // the heatmap shows them all; the table the first ones
      tbody.append(el("tr", {},
        el("th", { scope: "row" }, n.name),
        el("td", {}, n.product || "-"),
        el("td", { class: "num" }, n.wholeFree + " / " + n.wholeAllocatable),
        el("td", {}, n.mig.map((m) => m.profile + " " + m.free + "/" + m.allocatable).join(", ") || "-"),
        el("td", { class: "num" }, n.sharedAllocatable ? n.sharedFree + " / " + n.sharedAllocatable : "-"),
        el("td", {}, n.numa.map((z) => z.gpusAvailable + "/" + z.gpusAllocatable).join("  ") || "-", n.topologyPolicy !== "none" ? el("span", { class: "meta" }, " " + n.topologyPolicy) : null),
        el("td", {}, n.taints.join(", ") || "-"),
        el("td", { class: n.offersNothing ? "warn" : "" }, n.offersNothing || "yes"),
        el("td", { class: (n.gpuFaults || []).length || n.quarantined ? "warn" : "" }, gpuHealthText(n))));
    }
    table.append(tbody);
    sec.append(grid, table);
    if (rows > MAX_NODE_ROWS) {
      sec.append(el("p", { class: "meta" }, (rows - MAX_NODE_ROWS) + " more nodes in the heatmap; all of them: gpufed fleet --nodes -o json"));
    }
    wrap.append(sec);
  }
}

// ------------------------------------------------------------------------------------------ health

function renderHealth(clusters, fleet) {
  const ages = {};
  for (const c of (fleet ? fleet.clusters : [])) ages[c.cluster] = c.ageSeconds;
  const body = $("#health-table tbody");
  body.replaceChildren();
  for (const c of clusters) {
    body.append(el("tr", {},
      el("th", { scope: "row" }, c.name), el("td", {}, c.tier), el("td", {}, c.region || "-"),
      el("td", {}, el("span", { class: "badge h-" + c.health }, c.health)),
      el("td", {}, c.healthReason ? c.healthReason + " (" + healthWhy(c.health, ages[c.name]) + ")" : healthWhy(c.health, ages[c.name]))));
  }
}

// ------------------------------------------------------------------------------------------ jobs

function asks(j) {
  const r = j.request;
  let what;
  if (r.migProfile) what = "MIG " + r.migProfile;
  else if (r.migNeedGB) what = "MIG ≥" + r.migNeedGB + " GB";
  else what = r.gpus + " GPU" + (r.gpus === 1 ? "" : "s");
  if (r.pods > 1) what = r.pods + " × " + what;
  if (r.gpuProducts.length) what += " " + r.gpuProducts.join("|");
  if (r.numaAligned) what += ", NUMA";
  return what;
}

function renderQueue(jobs) {
  const body = $("#queue-table tbody");
  body.replaceChildren();
  // in the global queue's order (priority, fair share, age: docs/tenancy.md)
  const queued = jobs.filter((j) => j.state === "QUEUED")
    .sort((a, b) => (a.queuePosition ?? Infinity) - (b.queuePosition ?? Infinity));
  for (const j of queued) {
    const why = j.queueReason && j.queueReason !== j.reason ? el("span", { class: "meta" }, " · " + j.queueReason) : "";
    body.append(el("tr", {},
      el("td", {}, j.queuePosition == null ? "-" : String(j.queuePosition)),
      el("th", { scope: "row" }, el("a", { href: "#job-" + j.id, onclick: (e) => { e.preventDefault(); select(j.id); } }, j.name), el("span", { class: "meta" }, " " + j.id)),
      el("td", {}, j.tenant), el("td", {}, asks(j)), el("td", {}, since(j.createdAt)),
      el("td", { title: j.predictedWait || "" }, predictedStart(j)),
      el("td", { class: "reason" }, j.reason, why)));
  }
  if (!queued.length) body.append(el("tr", {}, el("td", { colspan: 7 }, "Nothing is waiting.")));
}

// a queued job's predicted on-prem start (docs/burst.md): "in 12 min on onprem-b", "never", or "-"
function predictedStart(j) {
  if (j.predictedWait == null) return "-";
  if (j.predictedStart == null) return "never on-prem";
  const wait = Math.max(0, j.predictedStart - Date.now() / 1000);
  return (wait < 60 ? "now" : "in " + ago(wait).replace(/ ago$/, "")) + (j.predictedCluster ? " on " + j.predictedCluster : "");
}

const money = (v) => (v == null ? "-" : "$" + v.toFixed(2));

function renderSpend(items) {
  const body = $("#spend-table tbody");
  body.replaceChildren();
  for (const t of items) {
    body.append(el("tr", { class: t.overBudget ? "warn" : "" },
      el("th", { scope: "row" }, t.tenant), el("td", { class: "num" }, money(t.spent)),
      el("td", { class: "num" }, t.gpuHours.toFixed(1)), el("td", { class: "num" }, money(t.committed)),
      el("td", { class: "num" }, t.budget == null ? "no budget" : money(t.budget) + " / " + t.period),
      el("td", { class: "num" }, t.overBudget ? "over budget: no new burst" : money(t.left))));
  }
  if (!items.length) body.append(el("tr", {}, el("td", { colspan: 6 }, "No cloud spend this period.")));
}

const keys = (d) => Object.entries(d).filter(([k]) => k !== "*").map(([k, v]) => k + "=" + v).join(" ") || "-";

function renderTenants(items) {
  const body = $("#tenants-table tbody");
  body.replaceChildren();
  for (const t of items) {
    const used = Object.fromEntries(Object.entries(t.used).map(([k, v]) => [k, k in t.quota ? v + "/" + t.quota[k] : v]));
    body.append(el("tr", { class: Object.keys(t.borrowed).length ? "warn" : "" },
      el("td", { class: "num" }, String(t.position)), el("th", { scope: "row" }, t.tenant),
      el("td", { class: "num" }, t.share.toFixed(2)), el("td", {}, keys(used)), el("td", {}, keys(t.borrowed)),
      el("td", {}, keys(t.lent)), el("td", {}, keys(t.running)), el("td", {}, keys(t.queued)),
      el("td", { class: "num" }, String(t.pending))));
  }
  if (!items.length) body.append(el("tr", {}, el("td", { colspan: 9 }, "No tenants.")));
}

function renderJobs(jobs) {
  const st = $("#f-state").value, cl = $("#f-cluster").value, text = $("#f-text").value.trim().toLowerCase();
  const clusters = new Set(jobs.map((j) => j.cluster).filter(Boolean));
  const sel = $("#f-cluster");
  const have = new Set([...sel.options].map((o) => o.value));
  for (const c of [...clusters].sort()) if (!have.has(c)) sel.append(el("option", {}, c));
  const body = $("#jobs-table tbody");
  body.replaceChildren();
  const shown = jobs.filter((j) => (!st || j.state === st) && (!cl || j.cluster === cl) &&
    (!text || j.name.toLowerCase().includes(text) || j.id.includes(text)));
  for (const j of shown.slice().reverse()) {
    body.append(el("tr", { class: j.id === state.selected ? "selected" : "" },
      el("th", { scope: "row" }, el("button", { type: "button", class: "link", "aria-pressed": j.id === state.selected ? "true" : "false",
        onclick: () => select(j.id) }, j.id)),
      el("td", {}, j.name), el("td", {}, j.tenant), el("td", {}, asks(j)),
      el("td", {}, el("span", { class: "badge s-" + j.state }, j.state)),
      el("td", {}, j.cluster || "-"), el("td", {}, since(j.updatedAt)), el("td", { class: "reason" }, j.reason),
      el("td", { class: "actions" },
        el("button", { type: "button", "aria-label": "Logs of " + j.name, onclick: () => showLogs(j) }, "Logs"),
        TERMINAL.includes(j.state) ? null
          : el("button", { type: "button", "aria-label": "Cancel " + j.name, onclick: () => cancelJob(j) }, "Cancel"))));
  }
  if (!shown.length) body.append(el("tr", {}, el("td", { colspan: 9 }, "No job matches.")));
}

const TERMINAL = ["SUCCEEDED", "FAILED", "CANCELLED"];

function authHeaders() {
  const token = localStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: "Bearer " + token } : {};
}

async function cancelJob(j) {
  if (!confirm("Cancel " + j.name + " (" + j.id + ")? Its workload is deleted from " + (j.cluster || "the queue") + ".")) return;
  const r = await fetch("/v1/jobs/" + encodeURIComponent(j.id), { method: "DELETE", headers: authHeaders() });
  if (!r.ok) {
    let msg = r.statusText;
    try { msg = (await r.json()).message || msg; } catch (e) { /* not JSON */ }
    showError(new Error("cancel " + j.name + ": " + r.status + " " + msg));
    return;
  }
  refresh();
}

async function showLogs(j) {
  select(j.id);
  const pre = $("#logs");
  pre.hidden = false;
  pre.textContent = "loading the log of " + j.name + " ...";
  const r = await fetch("/v1/jobs/" + encodeURIComponent(j.id) + "/logs?tailLines=200", { headers: authHeaders() });
  if (!r.ok) {
    let msg = r.statusText;
    try { msg = (await r.json()).message || msg; } catch (e) { /* not JSON */ }
    pre.textContent = "No log: " + msg;
    return;
  }
  pre.textContent = (await r.text()) || "(the log is empty so far)";
}

async function renderTimeline() {
  const sec = $("#timeline");
  if (!state.selected) { sec.hidden = true; return; }
  const job = state.jobs.find((j) => j.id === state.selected);
  const events = (await api("/v1/jobs/" + encodeURIComponent(state.selected) + "/events")).items;
  sec.hidden = false;
  $("#timeline-h").textContent = "Timeline of " + (job ? job.name + " (" + job.id + ")" : state.selected);
  $("#timeline-meta").textContent = job && job.traceId ? "trace id " + job.traceId : "";
  const list = $("#timeline-list");
  list.replaceChildren();
  // member trouble (docs/health.md): the member's own words, and what the broker did about them
  const trouble = /^(member trouble on |withdrawn from |image pull failed on )|\(last termination: /;
  for (const e of events) {
    list.append(el("li", trouble.test(e.reason || "") ? { class: "trouble" } : {},
      el("time", { datetime: new Date(e.at * 1000).toISOString() }, new Date(e.at * 1000).toLocaleTimeString()),
      " ", el("span", { class: "badge s-" + e.state }, e.state),
      e.cluster ? el("span", { class: "meta" }, " on " + e.cluster) : null,
      e.attempt ? el("span", { class: "meta" }, " · attempt " + e.attempt) : null,
      el("div", { class: "reason" }, e.reason)));
  }
}

function select(id) {
  if (id !== state.selected) $("#logs").hidden = true;
  state.selected = id;
  renderJobs(state.jobs);
  renderTimeline().catch(showError);
  $("#timeline").scrollIntoView({ block: "nearest" });
}

// ------------------------------------------------------------------------------------------ loop

function showError(err) {
  const s = $("#status");
  if (err.needsToken) {
    s.textContent = err.message;
    s.classList.remove("error");
    $("#token").focus();
    return;
  }
  s.textContent = "Error: " + err.message;
  s.classList.add("error");
}

async function refresh() {
  try {
    const [fleet, clusters, jobs, spend, tenants] = await Promise.all([
      api("/v1/fleet" + (state.showNodes ? "?nodes=true" : "")), api("/v1/clusters"), listAll("/v1/jobs"),
      api("/v1/spend"), api("/v1/tenants")]);
    state.fleet = fleet; state.clusters = clusters.items; state.jobs = jobs.items;
    renderProducts(fleet.products || []);
    $("#clusters").replaceChildren(...fleet.clusters.map(clusterCard));
    renderNodes(fleet.clusters);
    renderHealth(clusters.items, fleet);
    renderQueue(jobs.items);
    renderSpend(spend.items);
    renderTenants(tenants.items);
    renderJobs(jobs.items);
    if (state.selected) await renderTimeline();
    const s = $("#status");
    s.classList.remove("error");
    s.textContent = "Live · " + fleet.clusters.length + " clusters · " + jobs.items.length + " jobs · updated " + new Date().toLocaleTimeString();
    // Stale capacity (a poller shard being replaced) is said here, with /readyz's reason.
    const ready = await fetch("/readyz").then((r) => r.json()).catch(() => null);
    const stale = ready && ready.reasons && ready.reasons.capacity;
    if (stale) { s.classList.add("error"); s.textContent += " · " + stale; }
  } catch (err) {
    showError(err);
  }
}

// a link with #token=... (gpufed demo --keep prints one) signs in and leaves no token in the address bar
function tokenFromLink() {
  const given = location.hash.match(/^#token=(.+)$/);
  if (!given) return false;
  localStorage.setItem(TOKEN_KEY, decodeURIComponent(given[1]));
  history.replaceState(null, "", location.pathname + location.search);
  const field = document.querySelector("#token");
  if (field) field.value = localStorage.getItem(TOKEN_KEY);
  return true;
}

function start() {
  tokenFromLink();
  window.addEventListener("hashchange", () => { if (tokenFromLink()) refresh(); });
  const token = $("#token");
  token.value = localStorage.getItem(TOKEN_KEY) || "";
  $("#login").addEventListener("submit", (e) => {
    e.preventDefault();
    if (token.value) localStorage.setItem(TOKEN_KEY, token.value); else localStorage.removeItem(TOKEN_KEY);
    refresh();
  });
  $("#logout").addEventListener("click", () => { localStorage.removeItem(TOKEN_KEY); token.value = ""; refresh(); });
  $("#show-nodes").addEventListener("change", (e) => { state.showNodes = e.target.checked; refresh(); });
  for (const id of ["#f-state", "#f-cluster", "#f-text"]) $(id).addEventListener("input", () => renderJobs(state.jobs));
  $("#filters").addEventListener("submit", (e) => e.preventDefault());
  refresh();
  setInterval(refresh, POLL_MS);
}

document.addEventListener("DOMContentLoaded", start);

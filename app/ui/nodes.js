// Nodes: a GPU device map per node, grouped by topology domain. Each device is one cell: dark
// when a pod holds it whole, partly filled when pods share it (the fill is the used fraction),
// light when idle. Free GPU left on partly used devices is fragmented: only pods asking for a
// share of a GPU can use it. Nodes holding such fragments are outlined, and each domain says how
// much of its free GPU is fragmented. GPUs a node counts as used beyond what its devices hold
// are held for a waiting gang (the head-of-line reservation on the nodes that free soonest).
import { getJSON } from "./api.js";
import { esc, gpus, pct } from "./format.js";

export const title = "Nodes";
const HOSTNAME = "kubernetes.io/hostname";
const EPS = 1e-9;
/** Up to this many nodes, tiles are large and carry their node's name. */
const NAMED = 100;

/** A device's kind: "whole" (held whole), "shared" (pods share it), "idle". */
export function deviceKind(device) {
  if (device.free >= 1 - EPS) return "idle";
  if (device.free <= EPS && device.pods.length <= 1) return "whole";
  return "shared";
}

function domainOf(node, keys) {
  const parts = keys.filter((k) => k !== HOSTNAME && node.labels[k]).map((k) => node.labels[k]);
  return parts.length ? parts.join(" / ") : "";
}

/** How nodes are grouped: by topology domain, or by GPU model. */
const GROUPINGS = {
  topology: { label: "topology domain", of: domainOf, none: "no topology labels" },
  model: { label: "GPU model", of: (node) => node.gpuModel || "", none: "no GPU" },
};

/** Fragmented free GPU of a node: free shares on partly used devices. */
function fragmentedOf(node) {
  let out = 0;
  for (const device of node.gpus.devices) if (deviceKind(device) === "shared") out += device.free;
  return out;
}

/** Orders of the tiles inside a group. */
const ORDERS = {
  name: { label: "name", compare: (a, b) => a.name.localeCompare(b.name) },
  fragmented: {
    label: "most fragmented first",
    compare: (a, b) => fragmentedOf(b) - fragmentedOf(a) || a.name.localeCompare(b.name),
  },
  free: {
    label: "most free first",
    compare: (a, b) => gpuUse(b).free - gpuUse(a).free || a.name.localeCompare(b.name),
  },
};

/** A node's GPUs: used and free by its devices, and held for a waiting gang beyond them. */
export function gpuUse(node) {
  let free = 0;
  for (const device of node.gpus.devices) free += Math.max(0, device.free);
  const used = node.gpus.devices.length - free;
  return { used, free, held: Math.max(0, node.gpus.used - used) };
}

/** Per domain: nodes, GPUs (total/used/held/free), devices by kind, fragmented free GPU. */
export function summarize(nodes, keys, groupOf = domainOf, compare = ORDERS.name.compare) {
  const domains = new Map();
  for (const node of nodes) {
    const key = groupOf(node, keys);
    let d = domains.get(key);
    if (!d) {
      d = { name: key, nodes: [], total: 0, used: 0, held: 0, free: 0, whole: 0, shared: 0, idle: 0, fragmented: 0 };
      domains.set(key, d);
    }
    d.nodes.push(node);
    const use = gpuUse(node);
    d.total += node.gpus.total;
    d.used += use.used;
    d.held += use.held;
    d.free += use.free;
    for (const device of node.gpus.devices) {
      const kind = deviceKind(device);
      d[kind] += 1;
      if (kind === "shared") d.fragmented += device.free;
    }
  }
  const list = [...domains.values()].sort((a, b) => (a.name === "") - (b.name === "") || a.name.localeCompare(b.name));
  for (const d of list) d.nodes.sort(compare);
  return list;
}

function tile(node, named) {
  const devices = node.gpus.devices;
  let fragmented = false;
  const cells = devices.map((device) => {
    const kind = deviceKind(device);
    if (kind === "shared") {
      if (device.free > EPS) fragmented = true;
      return `<i class="d shared" style="--u:${(1 - device.free).toFixed(3)}"></i>`;
    }
    return `<i class="d ${kind}"></i>`;
  }).join("");
  const use = gpuUse(node);
  const classes = ["node"];
  if (fragmented) classes.push("frag");
  if (use.held > EPS) classes.push("held");
  if (node.unschedulable) classes.push("cordoned");
  if (!devices.length) classes.push("nogpu");
  const label = `${node.name}: ${node.gpuModel || "no GPU"}, ${gpus(use.free)} of ${gpus(node.gpus.total)} GPU free`
    + `${fragmented ? " (fragmented)" : ""}${use.held > EPS ? `, ${gpus(use.held)} held for a waiting gang` : ""}`
    + `${node.unschedulable ? ", cordoned" : ""}`;
  const name = named ? `<span class="nname">${esc(node.name)}</span>` : "";
  return `<a class="${classes.join(" ")}" href="#/nodes/${encodeURIComponent(node.name)}" data-node="${esc(node.name)}" title="${esc(label)}" aria-label="${esc(label)}">${name}<span class="cells">${cells || "<i class=\"d none\"></i>"}</span></a>`;
}

function detail(node) {
  if (!node) return "<p>No such node.</p>";
  const use = gpuUse(node);
  const topo = Object.entries(node.labels).filter(([k]) => k.startsWith("topology.") || k.startsWith("network.topology") || k.startsWith("nvidia.com/gpu"));
  return `<h2>Node ${esc(node.name)}</h2>
    <p>${esc(node.gpuModel || "no GPU")} · ${gpus(use.free)} of ${gpus(node.gpus.total)} GPU free
      ${use.held > EPS ? ` · ${gpus(use.held)} held for a waiting gang` : ""} · ${node.pods} pods
      ${node.unschedulable ? " · <b>cordoned</b>" : ""}${node.taints.length ? ` · taints ${esc(node.taints.join(", "))}` : ""}</p>
    <p class="meta">cpu ${esc(node.used.cpu)} of ${esc(node.allocatable.cpu)} used · memory ${esc(node.used.memory)} of ${esc(node.allocatable.memory)} used
      ${topo.length ? "· " + topo.map(([k, v]) => `${esc(k)}=${esc(v)}`).join(", ") : ""}</p>
    <table class="grid compact" id="n-devices"><caption>GPU devices</caption>
      <thead><tr><th scope="col" class="num">GPU</th><th scope="col">Kind</th><th scope="col" class="num">Free</th><th scope="col">Pods</th></tr></thead>
      <tbody>${node.gpus.devices.map((d) => `<tr><th scope="row" class="num">${d.index}</th><td>${deviceKind(d)}</td>
        <td class="num">${gpus(d.free)}</td><td>${esc(d.pods.join(", "))}</td></tr>`).join("")}</tbody></table>
    <p><a href="#/nodes">close</a></p>`;
}

export function create(main, rest) {
  let data = null;
  let model = "";
  let grouping = "topology";
  let order = "name";
  let selected = rest[0] || "";
  main.innerHTML = `
    <h1>Nodes</h1>
    <p class="meta" id="n-total"></p>
    <div class="toolbar">
      <label>Group by <select id="n-group">${Object.entries(GROUPINGS).map(([k, g]) => `<option value="${k}">${g.label}</option>`).join("")}</select></label>
      <label>GPU model <select id="n-model"><option value="">all</option></select></label>
      <label>Order <select id="n-order">${Object.entries(ORDERS).map(([k, o]) => `<option value="${k}">${o.label}</option>`).join("")}</select></label>
      <span class="legend"><i class="d whole"></i>held whole <i class="d shared" style="--u:.5"></i>shared (fill = used)
        <i class="d idle"></i>idle <span class="node frag legend-node"><i class="d shared" style="--u:.3"></i></span>node with fragmented free GPU
        <span class="node held legend-node"><i class="d idle"></i></span>held for a waiting gang</span>
    </div>
    <section id="n-detail" class="panel" hidden></section>
    <section aria-labelledby="n-domains-h">
      <h2 id="n-domains-h">By topology domain</h2>
      <div class="tablewrap"><table class="grid" id="n-domains">
        <caption class="sr-only">GPUs per topology domain</caption>
        <thead><tr><th scope="col" id="n-group-h">Domain</th><th scope="col" class="num">Nodes</th><th scope="col" class="num">GPUs</th>
          <th scope="col" class="num">Used</th><th scope="col" class="num">Held</th><th scope="col" class="num">Free</th><th scope="col" class="num">Idle devices</th>
          <th scope="col" class="num">Shared devices</th><th scope="col" class="num">Fragmented free</th><th scope="col" class="num">Fragmentation</th></tr></thead>
        <tbody></tbody>
      </table></div>
    </section>
    <div id="n-maps"></div>`;
  const select = main.querySelector("#n-model");
  select.addEventListener("change", () => { model = select.value; render(); });
  const groupSelect = main.querySelector("#n-group");
  groupSelect.addEventListener("change", () => { grouping = groupSelect.value; render(); });
  const orderSelect = main.querySelector("#n-order");
  orderSelect.addEventListener("change", () => { order = orderSelect.value; render(); });

  function render() {
    const all = data.nodes;
    const models = [...new Set(all.map((n) => n.gpuModel).filter(Boolean))].sort();
    if (select.dataset.models !== models.join("\n")) {
      select.dataset.models = models.join("\n");
      select.innerHTML = `<option value="">all</option>${models.map((m) => `<option>${esc(m)}</option>`).join("")}`;
      select.value = models.includes(model) ? model : "";
    }
    const nodes = model ? all.filter((n) => n.gpuModel === model) : all;
    const group = GROUPINGS[grouping];
    const domains = summarize(nodes, data.topologyKeys, group.of, ORDERS[order].compare);
    main.querySelector("#n-domains-h").textContent = `By ${group.label}`;
    main.querySelector("#n-group-h").textContent = grouping === "topology" ? "Domain" : "GPU model";
    const totals = summarize(nodes, []).at(0) || { total: 0, used: 0, held: 0, free: 0, fragmented: 0, nodes: [] };
    main.querySelector("#n-total").innerHTML = `<span data-field="nodes">${nodes.length}</span> nodes ·
      <span data-field="gpus">${gpus(totals.total)}</span> GPUs · <span data-field="used">${gpus(totals.used)}</span> used ·
      <span data-field="held">${gpus(totals.held)}</span> held for a waiting gang ·
      <span data-field="free">${gpus(totals.free)}</span> free, of which <span data-field="fragmented">${gpus(totals.fragmented)}</span> fragmented
      (${totals.free > 0 ? pct(totals.fragmented / totals.free) : "0.0%"}) · topology levels: ${esc(data.topologyKeys.join(" > "))}`;
    main.querySelector("#n-domains tbody").innerHTML = domains.map((d) => `<tr data-domain="${esc(d.name)}">
      <th scope="row">${esc(d.name || group.none)}</th>
      <td class="num" data-field="nodes">${d.nodes.length}</td><td class="num" data-field="gpus">${gpus(d.total)}</td>
      <td class="num" data-field="used">${gpus(d.used)}</td><td class="num" data-field="held">${gpus(d.held)}</td>
      <td class="num" data-field="free">${gpus(d.free)}</td>
      <td class="num" data-field="idle">${d.idle}</td><td class="num" data-field="shared">${d.shared}</td>
      <td class="num" data-field="fragmented">${gpus(d.fragmented)}</td>
      <td class="num" data-field="fragmentation">${d.free > 0 ? pct(d.fragmented / d.free) : "0.0%"}</td></tr>`).join("");
    const named = nodes.length <= NAMED;
    main.querySelector("#n-maps").innerHTML = domains.map((d, i) => `
      <section class="domain" data-domain="${esc(d.name)}" aria-labelledby="n-dom-h-${i}">
        <h2 id="n-dom-h-${i}">${esc(d.name || group.none)} <small>${d.nodes.length} nodes · ${gpus(d.free)} of ${gpus(d.total)} GPU free</small></h2>
        <div class="nodemap${named ? " named" : ""}">${d.nodes.map((n) => tile(n, named)).join("")}</div>
      </section>`).join("");
    renderDetail();
  }

  function renderDetail() {
    const panel = main.querySelector("#n-detail");
    panel.hidden = !selected;
    if (selected && data) panel.innerHTML = detail(data.nodes.find((n) => n.name === selected));
  }

  return {
    async refresh() {
      const next = await getJSON("debug/nodes", { since: data ? data.generation : undefined });
      if (next.unchanged) return;
      data = next;
      render();
    },
    route(next) {
      selected = next[0] || "";
      renderDetail();
      if (selected) main.querySelector("#n-detail").scrollIntoView({ block: "nearest" });
    },
  };
}

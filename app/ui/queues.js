// Queues: the tree with usage against guaranteed and limit, borrowed, lent, fair share and
// pending demand; and each queue's share of the cluster over time against its fair share.
import { lineChart } from "./chart.js";
import { getJSON } from "./api.js";
import { colour, esc, pct, quantity } from "./format.js";

export const title = "Queues";
const RESOURCES = ["nvidia.com/gpu", "cpu", "memory"];
const FIELDS = [
  ["usage", "Used"], ["guaranteed", "Guaranteed"], ["limit", "Limit"], ["borrowed", "Borrowed"],
  ["lent", "Lent"], ["fairShare", "Fair share"], ["pending", "Pending"],
];

function bar(row, resource) {
  const used = quantity(row.usage[resource]);
  const guaranteed = quantity(row.guaranteed[resource]);
  const limit = quantity(row.limit[resource]);
  const fair = quantity(row.fairShare[resource]);
  const pending = quantity(row.pending[resource]);
  const borrowed = Math.min(quantity(row.borrowed[resource]), used);
  const scale = Math.max(Number.isFinite(limit) ? limit : 0, guaranteed, used + pending, fair) || 1;
  const w = (v) => `${Math.min(100, (v / scale) * 100).toFixed(2)}%`;
  const own = used - borrowed;  // borrowing is accounted on the queues that hold pods
  const parts = [
    `<span class="seg own" style="width:${w(own)}"></span>`,
    `<span class="seg borrowed" style="left:${w(own)};width:${w(borrowed)}"></span>`,
    `<span class="seg pending" style="left:${w(used)};width:${w(pending)}"></span>`,
    guaranteed > 0 ? `<span class="mark guaranteed" style="left:${w(guaranteed)}"></span>` : "",
    `<span class="mark fair" style="left:${w(fair)}"></span>`,
    Number.isFinite(limit) ? `<span class="mark limit" style="left:${w(limit)}"></span>` : "",
  ];
  const label = `${resource}: used ${row.usage[resource]} (borrowed ${row.borrowed[resource]}), guaranteed ${row.guaranteed[resource]}, `
    + `limit ${row.limit[resource]}, fair share ${row.fairShare[resource]}, pending ${row.pending[resource]}`;
  return `<div class="qbar" role="img" aria-label="${esc(label)}" title="${esc(label)}">${parts.join("")}</div>`;
}

function atLimit(row, resource) {
  const limit = quantity(row.limit[resource]);
  return Number.isFinite(limit) && quantity(row.usage[resource]) >= limit;
}

export function create(main) {
  let resource = RESOURCES[0];
  let latest = null;
  const history = { last: 0, capacity: 720, resources: RESOURCES, samples: [] };
  main.innerHTML = `
    <h1>Queues</h1>
    <p class="meta" id="q-meta"></p>
    <p class="error-box" id="q-error" hidden></p>
    <div class="toolbar">
      <label>Resource <select id="q-resource">${RESOURCES.map((r) => `<option>${r}</option>`).join("")}</select></label>
      <span class="legend"><i class="sw own"></i>used <i class="sw borrowed"></i>of which borrowed
        <i class="sw pending"></i>pending <i class="sw mk guaranteed"></i>guaranteed <i class="sw mk fair"></i>fair share
        <i class="sw mk limit"></i>limit</span>
    </div>
    <section aria-labelledby="q-tree-h">
      <h2 id="q-tree-h">Queue tree</h2>
      <div class="tablewrap"><table class="grid" id="q-table">
        <caption class="sr-only">Each queue's usage against its guaranteed share and limit</caption>
        <thead><tr><th scope="col">Queue</th><th scope="col" class="barcol">Usage</th>
          ${FIELDS.map(([, label]) => `<th scope="col" class="num">${label}</th>`).join("")}
          <th scope="col" class="num">Dominant share</th><th scope="col" class="num">Weight</th></tr></thead>
        <tbody></tbody>
      </table></div>
    </section>
    <section aria-labelledby="q-chart-h">
      <h2 id="q-chart-h">Shares over time</h2>
      <figure class="chartbox">
        <div id="q-chart"></div>
        <figcaption>Each queue's share of the cluster's <span class="q-res-name"></span> (solid) against the
          share it deserves (dashed), sampled by Muster every <span id="q-interval"></span> s; the chart keeps
          its history across reloads.</figcaption>
      </figure>
      <table class="grid compact" id="q-latest">
        <caption>Latest sample <span id="q-sample-time"></span></caption>
        <thead><tr><th scope="col">Queue</th><th scope="col" class="num">Share</th><th scope="col" class="num">Deserved</th></tr></thead>
        <tbody></tbody>
      </table>
    </section>`;
  const select = main.querySelector("#q-resource");
  select.addEventListener("change", () => {
    resource = select.value;
    render();
  });

  function renderTable() {
    const data = latest;
    const meta = [`default queue <b>${esc(data.defaultQueue)}</b>`,
      data.file ? `configuration ${esc(data.file)}` : "no queue file (one open queue)"];
    const unknown = Object.entries(data.unknownQueues || {});
    if (unknown.length) meta.push(`pods naming unknown queues: ${unknown.map(([q, n]) => `${esc(q)} (${n})`).join(", ")}`);
    main.querySelector("#q-meta").innerHTML = meta.join(" · ");
    const error = main.querySelector("#q-error");
    error.hidden = !data.configError;
    error.textContent = data.configError ? `queue file refused, the previous configuration stays: ${data.configError}` : "";
    const rows = data.queues.map((row) => {
      const flags = [];
      if (atLimit(row, resource)) flags.push(`<span class="badge warn" data-flag="at-limit">at limit</span>`);
      if (!row.borrowing) flags.push(`<span class="badge">no borrowing</span>`);
      const cells = FIELDS.map(([field]) => `<td class="num" data-field="${field}">${esc(row[field][resource])}</td>`);
      return `<tr data-queue="${esc(row.name)}">
        <th scope="row" class="qname" style="padding-left:${0.5 + row.depth * 1.25}rem">${row.depth ? '<span class="twig">└</span>' : ""}${esc(row.name)} ${flags.join(" ")}</th>
        <td class="barcol">${bar(row, resource)}</td>${cells.join("")}
        <td class="num" data-field="dominantShare">${esc(row.dominantShare)}</td>
        <td class="num" data-field="weight">${esc(row.weight)}</td></tr>`;
    });
    main.querySelector("#q-table tbody").innerHTML = rows.join("");
  }

  function renderChart() {
    const k = history.resources.indexOf(resource);
    const names = latest ? latest.queues.map((q) => q.name) : [];
    const series = [];
    names.forEach((name, i) => {
      const used = [];
      const due = [];
      for (const s of history.samples) {
        const q = s.queues[name];
        if (!q) continue;
        used.push([s.time, q.used[k]]);
        due.push([s.time, q.deserved[k]]);
      }
      series.push({ label: `${name} share`, colour: colour(i), points: used },
        { label: `${name} deserved`, colour: colour(i), dashed: true, points: due });
    });
    const chart = main.querySelector("#q-chart");
    chart.innerHTML = lineChart(series, `Share of ${resource} over time per queue, against deserved`)
      + `<p class="legend">${names.map((n, i) => `<span><i class="sw" style="background:${colour(i)}"></i>${esc(n)}</span>`).join(" ")}</p>`;
    for (const el of main.querySelectorAll(".q-res-name")) el.textContent = resource;
    const last = history.samples[history.samples.length - 1];
    main.querySelector("#q-sample-time").dataset.seq = last ? String(last.seq) : "";
    main.querySelector("#q-sample-time").textContent = last ? `(#${last.seq}, ${new Date(last.time * 1000).toLocaleTimeString([], { hour12: false })})` : "";
    main.querySelector("#q-latest tbody").innerHTML = last ? names.filter((n) => last.queues[n]).map((n) => `
      <tr data-queue="${esc(n)}"><th scope="row">${esc(n)}</th>
      <td class="num" data-field="share">${pct(last.queues[n].used[k])}</td>
      <td class="num" data-field="deserved">${pct(last.queues[n].deserved[k])}</td></tr>`).join("") : "";
  }

  function render() {
    if (!latest) return;
    renderTable();
    renderChart();
  }

  return {
    async refresh() {
      const [data, more] = await Promise.all([
        getJSON("debug/queues"),
        getJSON("debug/queues/history", { since: history.last }),
      ]);
      if (more.last < history.last) {
        // Muster restarted: its numbering started again.
        history.samples = [];
        history.last = 0;
        return this.refresh();
      }
      history.samples.push(...more.samples);
      history.capacity = more.capacity;
      history.resources = more.resources;
      if (history.samples.length > history.capacity) history.samples.splice(0, history.samples.length - history.capacity);
      if (more.samples.length) history.last = more.samples[more.samples.length - 1].seq;
      main.querySelector("#q-interval").textContent = more.intervalSeconds;
      latest = data;
      render();
    },
  };
}

// Gangs: every gang's state, age and members; when it waits, the category and summary of why,
// and its ETA; each links to its full explanation (/explain), shown here on demand.
import { getJSON, href } from "./api.js";
import { duration, esc } from "./format.js";

export const title = "Gangs";
const STATES = ["waiting", "planned", "binding", "running", "unknown"];
/** Table columns: sort key (none: not sortable), heading, class. */
const COLUMNS = [
  ["gang", "Gang", ""], ["queue", "Queue", ""], ["state", "State", ""], ["age", "Age", "num"],
  ["members", "Members", "num"], ["category", "Category", ""], ["", "Why", ""], ["eta", "ETA", "num"],
  ["", "Explain", ""],
];
/** How rows compare under each sort key (unknown ages and ETAs last). */
const LAST = Number.POSITIVE_INFINITY;
const SORTS = {
  gang: (r) => r.gang,
  queue: (r) => r.queue,
  state: (r) => STATES.indexOf(r.state),
  age: (r) => (r.ageSeconds === null ? -1 : r.ageSeconds),
  members: (r) => r.members,
  category: (r) => (r.state === "waiting" ? r.category : "~"),
  eta: (r) => (r.state !== "waiting" ? -1 : r.eta_seconds === null ? LAST : r.eta_seconds),
};

function compare(a, b) {
  return typeof a === "string" ? a.localeCompare(b) : a - b;
}

function explainPanel(body) {
  const fixes = body.fixes.length
    ? `<ul>${body.fixes.map((f) => `<li><b>${esc(f.change)}</b>: ${esc(f.effect)}</li>`).join("")}</ul>`
    : "<p>No change found that would start it sooner.</p>";
  const nodes = body.nodes.length
    ? `<table class="grid compact"><caption>Why nodes refuse a member</caption>
        <thead><tr><th scope="col">Reason</th><th scope="col" class="num">Nodes</th></tr></thead>
        <tbody>${body.nodes.map((n) => `<tr><td>${esc(n.reason ?? JSON.stringify(n))}</td><td class="num">${esc(n.count ?? "")}</td></tr>`).join("")}</tbody></table>`
    : "";
  const position = body.position ? `<p>Position in queue <b>${esc(body.position.queue)}</b>: ${body.position.index} of ${body.position.of}</p>` : "";
  return `<h3>${esc(body.subject)}</h3>
    <p><span class="cat cat-${esc(body.category)}">${esc(body.category)}</span> ${esc(body.summary)}</p>
    <p>State <b>${esc(body.state)}</b> · ETA <b>${body.eta_seconds === null ? "unknown" : duration(body.eta_seconds)}</b></p>
    ${position}
    ${body.planner ? `<p>The planner says: ${esc(body.planner)}</p>` : ""}
    <h4>What would help</h4>${fixes}${nodes}`;
}

export function create(main, rest) {
  let filter = { state: "", text: "" };
  let sort = { key: "", direction: 1 };
  let rows = [];
  let selected = rest.length >= 2 ? `${rest[0]}/${rest[1]}` : "";
  main.innerHTML = `
    <h1>Gangs</h1>
    <p class="meta" id="g-counts"></p>
    <div class="toolbar">
      <label>State <select id="g-state"><option value="">all</option>${STATES.map((s) => `<option>${s}</option>`).join("")}</select></label>
      <label>Find <input type="search" id="g-text" placeholder="namespace/name, queue or reason"></label>
    </div>
    <div class="tablewrap"><table class="grid" id="g-table">
      <caption class="sr-only">Gangs with their state and why they wait</caption>
      <thead><tr>${COLUMNS.map(([key, label, cls]) => key
        ? `<th scope="col" class="${cls}" data-sort="${key}" aria-sort="none"><button type="button" class="sort">${label}</button></th>`
        : `<th scope="col" class="${cls}">${label}</th>`).join("")}</tr></thead>
      <tbody></tbody>
    </table></div>
    <p class="empty" id="g-empty" hidden>No gangs: Muster has seen no pod with a gang label yet.</p>
    <section id="g-explain" class="panel" aria-live="polite" hidden></section>`;
  main.querySelector("#g-state").addEventListener("change", (e) => { filter.state = e.target.value; render(); });
  main.querySelector("#g-text").addEventListener("input", (e) => { filter.text = e.target.value.toLowerCase(); render(); });
  for (const th of main.querySelectorAll("#g-table th[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => {
      const key = th.dataset.sort;
      sort = { key, direction: sort.key === key ? -sort.direction : 1 };
      for (const other of main.querySelectorAll("#g-table th[data-sort]")) {
        other.setAttribute("aria-sort", other === th ? (sort.direction > 0 ? "ascending" : "descending") : "none");
      }
      render();
    });
  }

  function render() {
    const counts = {};
    for (const r of rows) counts[r.state] = (counts[r.state] || 0) + 1;
    main.querySelector("#g-counts").innerHTML = `${rows.length} gangs`
      + STATES.filter((s) => counts[s]).map((s) => ` · <span data-count="${s}">${counts[s]}</span> ${s}`).join("");
    const shown = rows.filter((r) => (!filter.state || r.state === filter.state)
      && (!filter.text || `${r.gang} ${r.queue} ${r.category} ${r.summary}`.toLowerCase().includes(filter.text)));
    if (sort.key) {
      const of = SORTS[sort.key];
      shown.sort((a, b) => sort.direction * compare(of(a), of(b)) || a.gang.localeCompare(b.gang));
    }
    main.querySelector("#g-empty").hidden = rows.length > 0;
    main.querySelector("#g-table tbody").innerHTML = shown.map((r) => {
      const [ns, name] = r.gang.split("/");
      const waiting = r.state === "waiting";
      return `<tr data-gang="${esc(r.gang)}" class="${r.gang === selected ? "selected" : ""}">
        <th scope="row"><a href="#/gangs/${encodeURIComponent(ns)}/${encodeURIComponent(name)}">${esc(r.gang)}</a></th>
        <td data-field="queue">${esc(r.queue)}</td>
        <td data-field="state"><span class="state st-${esc(r.state)}">${esc(r.state)}</span></td>
        <td class="num" data-field="age">${r.ageSeconds === null ? "—" : duration(r.ageSeconds)}</td>
        <td class="num" data-field="members">${r.bound}/${r.members} <small>(min ${r.minMember})</small></td>
        <td data-field="category">${waiting ? `<span class="cat cat-${esc(r.category)}">${esc(r.category)}</span>` : ""}</td>
        <td data-field="summary" class="why">${esc(r.summary)}</td>
        <td class="num" data-field="eta">${waiting ? (r.eta_seconds === null ? "unknown" : duration(r.eta_seconds)) : ""}</td>
        <td><a href="${esc(href(r.explain.replace(/^\//, "")))}" target="_blank" rel="noopener">JSON</a></td></tr>`;
    }).join("");
  }

  async function showExplain() {
    const panel = main.querySelector("#g-explain");
    if (!selected) { panel.hidden = true; return; }
    const [ns, name] = selected.split("/");
    const body = await getJSON(`explain/${encodeURIComponent(ns)}/gang/${encodeURIComponent(name)}`);
    panel.innerHTML = `<h2>Explanation</h2>${explainPanel(body)}<p><a href="#/gangs">close</a></p>`;
    panel.hidden = false;
  }

  return {
    async refresh() {
      const [list, outlook] = await Promise.all([getJSON("debug/gangs"), getJSON("debug/gangs/outlook")]);
      const why = new Map(outlook.gangs.map((g) => [g.gang, g]));
      rows = list.gangs.map((g) => {
        const o = why.get(g.gang) || { queue: "", category: "none", summary: g.reason, eta_seconds: null, explain: "" };
        return { ...g, queue: o.queue, category: o.category, summary: o.summary || g.reason,
          eta_seconds: o.eta_seconds, explain: o.explain || `/explain/${g.gang.replace("/", "/gang/")}` };
      });
      render();
      await showExplain();
    },
    route(next) {
      selected = next.length >= 2 ? `${next[0]}/${next[1]}` : "";
      render();
      showExplain().catch((error) => {
        const panel = main.querySelector("#g-explain");
        panel.hidden = false;
        panel.textContent = error.message;
      });
    },
  };
}

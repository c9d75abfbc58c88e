// Events: Muster's recent decisions from its journal (/debug/events): plans, preemptions and
// reclaims (with their victims and the GPU-seconds lost), rollbacks, barrier timeouts, gangs
// started, plans expired or released. Newest first; polled with since= so only new ones come.
import { getJSON } from "./api.js";
import { clock, esc } from "./format.js";

export const title = "Events";
/** Rows kept in the page (the server's journal keeps its own number, `capacity`). */
const KEEP = 500;
const KINDS = ["plan", "preemption", "reclaim", "rollback", "barrier-timeout", "gang-started",
  "plan-expired", "plan-released"];

function seconds(value) {
  return value >= 100 ? String(Math.round(value)) : String(Math.round(value * 10) / 10);
}

function nodesText(nodes) {
  if (!nodes.length) return "";
  const counts = new Map();
  for (const n of nodes) counts.set(n, (counts.get(n) || 0) + 1);
  const parts = [...counts].map(([n, c]) => (c > 1 ? `${n} (${c})` : n));
  return parts.length > 4 ? `${parts.slice(0, 4).join(", ")} and ${parts.length - 4} more` : parts.join(", ");
}

export function create(main) {
  let events = [];
  let since = null;
  let totals = null;
  let kind = "";
  let missed = 0;
  main.innerHTML = `
    <h1>Events</h1>
    <p class="meta">Muster's recent scheduling decisions, newest first.</p>
    <ul class="totals" id="e-totals" aria-label="Totals since Muster started"></ul>
    <div class="toolbar">
      <label>Kind <select id="e-kind"><option value="">all</option>${KINDS.map((k) => `<option>${k}</option>`).join("")}</select></label>
      <span class="meta" id="e-missed"></span>
    </div>
    <div class="tablewrap"><table class="grid" id="e-table">
      <caption class="sr-only">Recent decisions</caption>
      <thead><tr><th scope="col" class="num">#</th><th scope="col">Time</th><th scope="col">Kind</th><th scope="col">Gang</th>
        <th scope="col">Queue</th><th scope="col">What</th><th scope="col">Nodes</th><th scope="col">Victims</th>
        <th scope="col" class="num">GPU-s lost</th></tr></thead>
      <tbody></tbody>
    </table></div>
    <p class="empty" id="e-empty" hidden>No decisions yet.</p>`;
  main.querySelector("#e-kind").addEventListener("change", (e) => { kind = e.target.value; render(); });

  function render() {
    if (totals) {
      const counts = KINDS.filter((k) => totals.counts[k]).map((k) => `<li>${k}: <b data-total="${k}">${totals.counts[k]}</b></li>`);
      const lost = Object.entries(totals.gpuSecondsLost).map(([k, v]) => `<li>GPU-seconds lost to ${esc(k)}: <b data-lost="${esc(k)}">${seconds(v)}</b></li>`);
      const victims = Object.entries(totals.victims).map(([k, v]) => `<li>units evicted by ${esc(k)}: <b data-victims="${esc(k)}">${v}</b></li>`);
      main.querySelector("#e-totals").innerHTML = [...counts, ...victims, ...lost].join("") || "<li>nothing yet</li>";
    }
    main.querySelector("#e-missed").textContent = missed ? `${missed} older events were dropped by the journal before this page read them` : "";
    const shown = kind ? events.filter((e) => e.kind === kind) : events;
    main.querySelector("#e-empty").hidden = shown.length > 0;
    main.querySelector("#e-table tbody").innerHTML = shown.map((e) => {
      const [ns, name] = e.gang.split("/");
      const gang = name ? `<a href="#/gangs/${encodeURIComponent(ns)}/${encodeURIComponent(name)}">${esc(e.gang)}</a>` : esc(e.gang);
      const victims = e.victims.map((v) => `${esc(v.unit)} (${v.pods} pods, ${v.gpus} GPU, ${seconds(v.gpuSecondsLost)} GPU-s)`).join("<br>");
      return `<tr data-seq="${e.seq}" data-kind="${esc(e.kind)}">
        <td class="num">${e.seq}</td><td data-field="time">${clock(e.time)}</td>
        <td data-field="kind"><span class="kind k-${esc(e.kind)}">${esc(e.kind)}</span></td>
        <th scope="row" data-field="gang">${gang}</th><td data-field="queue">${esc(e.queue ?? "")}</td>
        <td data-field="message" class="why">${esc(e.message)}</td>
        <td data-field="nodes" title="${esc(e.nodes.join(", "))}">${esc(nodesText(e.nodes))}</td>
        <td data-field="victims">${victims}</td>
        <td class="num" data-field="lost">${e.gpuSecondsLost ? seconds(e.gpuSecondsLost) : ""}</td></tr>`;
    }).join("");
  }

  return {
    async refresh() {
      const page = await getJSON("debug/events", since === null ? { limit: 200 } : { since, limit: 1000 });
      if (since !== null && page.latest < since) {
        // Muster restarted: its numbering started again.
        events = [];
        since = null;
        return this.refresh();
      }
      missed += page.missed;
      totals = page.totals;
      if (page.events.length) {
        events = [...page.events.reverse(), ...events].slice(0, KEEP);
      }
      since = page.next;
      render();
    },
  };
}

// The dashboard shell: one page at a time (chosen by the URL's #), refreshed live by polling.
import * as events from "./events.js";
import * as gangs from "./gangs.js";
import * as nodes from "./nodes.js";
import * as queues from "./queues.js";

const PAGES = { queues, gangs, nodes, events };
/** Milliseconds between refreshes while "live" is ticked and the tab is visible. */
const INTERVAL = 3000;

const main = document.getElementById("page");
const status = document.getElementById("status");
const live = document.getElementById("live");
let current = null;
let timer = null;

function parseHash() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const name = PAGES[parts[0]] ? parts[0] : "queues";
  return { name, rest: PAGES[parts[0]] ? parts.slice(1).filter(Boolean) : [] };
}

function schedule() {
  clearTimeout(timer);
  if (live.checked && !document.hidden) timer = setTimeout(tick, INTERVAL);
}

async function tick() {
  const view = current;
  if (!view || view.busy) return;
  view.busy = true;
  clearTimeout(timer);
  const started = performance.now();
  try {
    await view.page.refresh();
    if (view !== current) return;
    const ms = performance.now() - started;
    if (!view.rendered) {
      view.rendered = true;
      // How long the first render took: from navigation start, and from this page's mount.
      main.dataset.ready = "1";
      main.dataset.renderMs = String(Math.round(performance.now() - view.mounted));
      document.documentElement.dataset.sinceNavigationMs = String(Math.round(performance.now()));
    }
    status.textContent = `updated ${new Date().toLocaleTimeString([], { hour12: false })} (${Math.round(ms)} ms)`;
    status.classList.remove("error");
  } catch (error) {
    if (view !== current) return;
    status.textContent = error.message;
    status.classList.add("error");
  } finally {
    view.busy = false;
  }
  if (view === current) schedule();
}

function route() {
  const { name, rest } = parseHash();
  if (current && current.name === name) {
    current.page.route?.(rest);
    return;
  }
  if (current) current.page.destroy?.();
  clearTimeout(timer);
  delete main.dataset.ready;
  delete main.dataset.renderMs;
  main.dataset.page = name;
  main.replaceChildren();
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `${PAGES[name].title} · Muster`;
  const mounted = performance.now();
  current = { name, page: PAGES[name].create(main, rest), mounted, rendered: false };
  tick();
}

window.addEventListener("hashchange", route);
live.addEventListener("change", () => (live.checked ? tick() : clearTimeout(timer)));
document.addEventListener("visibilitychange", () => {
  if (!document.hidden && live.checked) tick();
});
route();

// Small formatting helpers shared by the pages.

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Text made safe to put inside HTML (element content or a quoted attribute). */
export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const UNITS = {
  "": 1, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
};

/** A Kubernetes quantity as Muster prints it ("8", "500m", "1.5Gi", "unlimited") as a number. */
export function quantity(text) {
  if (text === undefined || text === null || text === "") return 0;
  if (text === "unlimited") return Infinity;
  const match = /^(-?[0-9.]+(?:e-?[0-9]+)?)([a-zA-Z]*)$/.exec(String(text));
  if (!match || !(match[2] in UNITS)) return NaN;
  return Number(match[1]) * UNITS[match[2]];
}

/** A fraction as a percentage with one decimal: 0.4567 -> "45.7%". */
export function pct(fraction) {
  return `${(fraction * 100).toFixed(1)}%`;
}

/** A number of seconds as "45s", "12m 5s", "3h 5m", "2d 4h"; "—" for null. */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** A GPU amount without float noise: 2.5 -> "2.5", 0.30000000000000004 -> "0.3". */
export function gpus(value) {
  return String(Math.round(value * 1000) / 1000);
}

/** Wall-clock time of an epoch second, as HH:MM:SS in the browser's zone. */
export function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString([], { hour12: false });
}

/** A distinct colour for the i-th series (readable on white, distinguishable in print). */
export function colour(i) {
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];
  if (i < PALETTE.length) return PALETTE[i];
  return `hsl(${(i * 137.5) % 360} 65% 40%)`;
}

// A line chart drawn as SVG by hand (no library): time on x, a fraction on y.
import { clock, esc, pct } from "./format.js";

const W = 880;
const H = 260;
const PAD = { left: 52, right: 12, top: 12, bottom: 30 };

function niceMax(value) {
  if (!(value > 0)) return 0.1;
  const steps = [0.05, 0.1, 0.2, 0.25, 0.5, 1, 1.5, 2, 5, 10];
  return steps.find((s) => s >= value * 1.05) ?? value * 1.1;
}

/**
 * SVG markup for `series` ([{label, colour, dashed, points: [[epochSeconds, fraction]...]}]).
 * `title` becomes the accessible name of the image.
 */
export function lineChart(series, title) {
  const all = series.flatMap((s) => s.points);
  if (all.length === 0) {
    return `<p class="empty">No samples yet.</p>`;
  }
  let t0 = Math.min(...all.map((p) => p[0]));
  let t1 = Math.max(...all.map((p) => p[0]));
  if (t1 - t0 < 1) { t0 -= 30; t1 += 30; }
  const yMax = niceMax(Math.max(...all.map((p) => p[1])));
  const x = (t) => PAD.left + ((t - t0) / (t1 - t0)) * (W - PAD.left - PAD.right);
  const y = (v) => H - PAD.bottom - (v / yMax) * (H - PAD.top - PAD.bottom);
  const parts = [];
  for (let i = 0; i <= 4; i += 1) {
    const v = (yMax * i) / 4;
    parts.push(`<line class="grid" x1="${PAD.left}" x2="${W - PAD.right}" y1="${y(v)}" y2="${y(v)}"/>`,
      `<text class="tick" x="${PAD.left - 6}" y="${y(v) + 4}" text-anchor="end">${pct(v)}</text>`);
  }
  let previous = "";
  for (let i = 0; i <= 4; i += 1) {
    const t = t0 + ((t1 - t0) * i) / 4;
    const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
    const text = clock(t);
    if (text === previous) continue;  // a short history: one label per second
    previous = text;
    parts.push(`<text class="tick" x="${x(t)}" y="${H - 8}" text-anchor="${anchor}">${text}</text>`);
  }
  for (const s of series) {
    if (s.points.length === 0) continue;
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join("");
    const dash = s.dashed ? ' stroke-dasharray="6 4"' : "";
    parts.push(`<path d="${d}" fill="none" stroke="${s.colour}" stroke-width="${s.dashed ? 1.5 : 2.2}"${dash}><title>${esc(s.label)}</title></path>`);
    if (s.points.length === 1) {
      const [t, v] = s.points[0];
      parts.push(`<circle cx="${x(t)}" cy="${y(v)}" r="3" fill="${s.colour}"/>`);
    }
  }
  return `<svg class="chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(title)}">${parts.join("")}</svg>`;
}

// Reading Muster's JSON endpoints. Every URL is relative to the dashboard's own (…/ui/), so the
// dashboard works behind a path prefix (kubectl proxy, an ingress) as well as at /ui.
const BASE = new URL("../", document.baseURI);

/** The absolute URL of a Muster path such as "debug/queues" (no leading slash). */
export function href(path, params = {}) {
  const url = new URL(path, BASE);
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
  }
  return url.href;
}

/** GET a Muster path and parse its JSON; throws an Error naming the path on failure. */
export async function getJSON(path, params = {}) {
  const url = href(path, params);
  let response;
  try {
    response = await fetch(url, { headers: { accept: "application/json" }, cache: "no-store" });
  } catch (error) {
    throw new Error(`${path}: Muster is not reachable (${error.message})`);
  }
  if (!response.ok) {
    throw new Error(`${path}: HTTP ${response.status}`);
  }
  return response.json();
}

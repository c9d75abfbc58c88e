"""The dashboard in a real browser (Debian's Chromium via Playwright) against a running Muster
with real state: a bound gang, a queue at its limit with a pod waiting on quota, shared GPUs,
and waiting gangs. Every number a page shows is checked against the ``/debug/*`` answer it
comes from; no page may log a console error. Screenshots go to docs/ui/ (the README's)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page

from app.core.model.errors import GatewayError
from app.main import create_app
from app.settings import Settings
from tests.conftest import running
from tests.ui.browser import README_SHOTS, SHOTS, open_page, show, visit
from tests.ui.staging import DEMO_NODES, QUEUES, KubeScheduler, member, shared

FIELDS = ("usage", "guaranteed", "limit", "borrowed", "lent", "fairShare", "pending")
HOSTNAME = "kubernetes.io/hostname"


def eventually(check: Callable[[], None], timeout: float = 15.0) -> None:
    """Run ``check`` until it passes (the page polls every few seconds), or fail with its
    last error after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise


@pytest.fixture(scope="module")
def muster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A Muster on the demo cluster with the state described in the module docstring."""
    queues = tmp_path_factory.mktemp("ui") / "queues.yaml"
    queues.write_text(QUEUES)
    settings = Settings(demo=True, queue_file=queues, share_interval_seconds=0.25)
    with running(create_app(settings)) as client:
        ks = KubeScheduler(client, DEMO_NODES)
        # research: a gang of two 8-GPU members, bound together.
        ks.schedule_gang([member(f"train-{i}", "train", 2, 8, "research") for i in range(2)])
        # team-a: 8 GPUs bound, its limit; a third pod waits on quota.
        for i in range(2):
            assert ks.schedule(member(f"a-{i}", f"a-{i}", 1, 4, "team-a", ns="team-a"))
        assert ks.filter(member("a-2", "a-2", 1, 4, "team-a", ns="team-a")) == []
        # three pods sharing GPUs.
        for name, fraction in (("embed", "0.5"), ("rerank", "0.25"), ("chat", "0.3")):
            assert ks.schedule(shared(name, fraction))
        # default: a gang with 2 of its 4 members, and one the cluster cannot hold.
        for i in range(2):
            assert ks.filter(member(f"llama-{i}", "llama", 4, 8, "default")) == []
        for i in range(3):
            assert ks.filter(member(f"big-{i}", "big", 3, 8, "default")) == []
        yield client


def queues_file(client: httpx.Client) -> Path:
    return Path(client.get("/debug/queues").json()["file"])


def base(client: httpx.Client) -> str:
    return str(client.base_url).rstrip("/")


def cell(page: Page, row: str, field: str) -> str:
    return page.locator(f"{row} [data-field='{field}']").inner_text().strip()


def test_queues_page_shows_the_tree_and_the_share_history(
    browser: Browser, muster: httpx.Client
) -> None:
    with visit(browser, base(muster), "queues", "demo cluster") as page:
        for shown_resource in ("nvidia.com/gpu", "cpu"):
            page.select_option("#q-resource", shown_resource)

            def tree_matches(resource: str = shown_resource) -> None:
                rows = muster.get("/debug/queues").json()["queues"]
                shown = page.locator("#q-table tbody tr").evaluate_all(
                    "rows => rows.map(r => r.dataset.queue)"
                )
                assert shown == [r["name"] for r in rows]
                for row in rows:
                    where = f"#q-table tr[data-queue='{row['name']}']"
                    for field in FIELDS:
                        assert cell(page, where, field) == row[field][resource], (row, field)
                    assert cell(page, where, "dominantShare") == f"{row['dominantShare']:g}"
                    bar = page.locator(f"{where} .qbar").get_attribute("aria-label") or ""
                    used, borrowed = row["usage"][resource], row["borrowed"][resource]
                    assert bar.startswith(f"{resource}: used {used} (borrowed {borrowed}),"), bar

            eventually(tree_matches)
        page.select_option("#q-resource", "nvidia.com/gpu")
        queues = {q["name"]: q for q in muster.get("/debug/queues").json()["queues"]}
        assert queues["team-a"]["usage"]["nvidia.com/gpu"] == "8"  # at its limit
        assert queues["team-a"]["pending"]["nvidia.com/gpu"] == "4"
        flagged = page.locator("#q-table tr:has([data-flag='at-limit'])").evaluate_all(
            "rows => rows.map(r => r.dataset.queue)"
        )
        assert flagged == ["team-a"]

        def chart_matches() -> None:
            seq = int(page.locator("#q-sample-time").get_attribute("data-seq") or 0)
            history = muster.get("/debug/queues/history", params={"since": seq - 1}).json()
            sample = history["samples"][0]  # the one the page shows as its latest
            assert sample["seq"] == seq and seq >= 2
            for name, share in sample["queues"].items():
                where = f"#q-latest tr[data-queue='{name}']"
                gpu = {"share": share["used"][0], "deserved": share["deserved"][0]}
                for field, value in gpu.items():
                    shown = float(cell(page, where, field).rstrip("%"))
                    assert abs(shown - value * 100) <= 0.051, (name, field, shown, value)

        eventually(chart_matches)
        # One solid and one dashed line per queue, drawn from at least two samples by now.
        assert page.locator("#q-chart svg path").count() == 2 * len(queues)
        assert page.locator("#q-chart svg path[stroke-dasharray]").count() == len(queues)
        page.reload()
        page.wait_for_selector("main[data-ready='1']")
        assert page.locator("#q-chart svg path").count() == 2 * len(queues)  # kept by the server
        page.screenshot(path=str(SHOTS / "queues.png"), full_page=True)
        # A queue file that does not validate is refused and shown; the tree stays as it was.
        good = queues_file(muster).read_text()
        queues_file(muster).write_text(good.replace("limit: {nvidia.com/gpu: 8}", "limit: {x: 1}"))
        try:
            page.wait_for_selector("#q-error:not([hidden])", timeout=20_000)
            error = muster.get("/debug/queues").json()["configError"]
            assert error and error in page.locator("#q-error").inner_text()
            assert page.locator("#q-table tbody tr").count() == len(queues)
        finally:
            queues_file(muster).write_text(good)
        page.wait_for_selector("#q-error[hidden]", state="attached", timeout=20_000)


def test_gangs_page_says_why_each_gang_waits(browser: Browser, muster: httpx.Client) -> None:
    with visit(browser, base(muster), "gangs", "demo cluster") as page:

        def rows_match() -> None:
            gangs = muster.get("/debug/gangs").json()["gangs"]
            outlook = {g["gang"]: g for g in muster.get("/debug/gangs/outlook").json()["gangs"]}
            shown = page.locator("#g-table tbody tr").evaluate_all(
                "rows => rows.map(r => r.dataset.gang)"
            )
            assert shown == [g["gang"] for g in gangs]
            for gang in gangs:
                where = f"#g-table tr[data-gang='{gang['gang']}']"
                why = outlook[gang["gang"]]
                assert cell(page, where, "state") == gang["state"]
                assert cell(page, where, "queue") == why["queue"]
                members = f"{gang['bound']}/{gang['members']} (min {gang['minMember']})"
                assert cell(page, where, "members") == members
                assert cell(page, where, "summary") == why["summary"]
                if gang["state"] == "waiting":
                    assert cell(page, where, "category") == why["category"]

        eventually(rows_match)
        outlook = {g["gang"]: g for g in muster.get("/debug/gangs/outlook").json()["gangs"]}
        assert outlook["ml/train"]["state"] == "running"
        assert outlook["ml/llama"]["category"] == "gang-incomplete"
        assert outlook["ml/big"]["state"] == "waiting"
        assert outlook["ml/big"]["category"] in ("capacity", "fragmentation", "reservation")

        # Sorting by a column (a button in its header, aria-sort says which way).
        def states() -> list[str]:
            return page.locator("#g-table tbody [data-field='state']").all_inner_texts()

        page.click("#g-table th[data-sort='state'] button")
        assert page.get_attribute("#g-table th[data-sort='state']", "aria-sort") == "ascending"
        order = ["waiting", "planned", "binding", "running", "unknown"]
        assert states() == sorted(states(), key=order.index) and states()[0] == "waiting"
        page.click("#g-table th[data-sort='state'] button")
        assert page.get_attribute("#g-table th[data-sort='state']", "aria-sort") == "descending"
        assert states() == sorted(states(), key=order.index, reverse=True)
        page.click("#g-table tr[data-gang='ml/big'] th a")
        page.wait_for_selector("#g-explain:not([hidden]) h3")
        explained = muster.get("/explain/ml/gang/big").json()
        assert explained["summary"] in page.locator("#g-explain").inner_text()
        link = page.locator("#g-table tr[data-gang='ml/big'] a:text('JSON')").get_attribute("href")
        assert link == f"{base(muster)}/explain/ml/gang/big"
        page.screenshot(path=str(SHOTS / "gangs.png"), full_page=True)


def domains_of(nodes: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per topology domain, computed here from /debug/nodes (independently of the page).

    Used and free count what the devices hold; GPUs a node counts as used beyond that are
    held for a waiting gang (its head-of-line reservation)."""
    keys = [k for k in nodes["topologyKeys"] if k != HOSTNAME]
    out: dict[str, dict[str, float]] = {}
    for node in nodes["nodes"]:
        name = " / ".join(node["labels"][k] for k in keys if node["labels"].get(k))
        fields = ("nodes", "gpus", "used", "held", "free", "idle", "shared", "fragmented")
        d = out.setdefault(name, dict.fromkeys(fields, 0.0))
        free = sum(max(device["free"], 0) for device in node["gpus"]["devices"])
        used = len(node["gpus"]["devices"]) - free
        d["nodes"] += 1
        d["gpus"] += node["gpus"]["total"]
        d["used"] += used
        d["held"] += max(node["gpus"]["used"] - used, 0)
        d["free"] += free
        for device in node["gpus"]["devices"]:
            if device["free"] >= 1:
                d["idle"] += 1
            elif device["free"] > 0 or len(device["pods"]) > 1:
                d["shared"] += 1
                d["fragmented"] += device["free"]
    return out


def number(text: str) -> float:
    return float(text.rstrip("%"))


def check_nodes_page(page: Page, client: httpx.Client) -> dict[str, Any]:
    """The domain table, totals and device cells agree with /debug/nodes; returns it."""
    nodes = client.get("/debug/nodes").json()
    domains = domains_of(nodes)
    shown = page.locator("#n-domains tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.domain)"
    )
    assert sorted(shown) == sorted(domains)
    for name, d in domains.items():
        where = f"#n-domains tr[data-domain='{name}']"
        for field, value in d.items():
            assert abs(number(cell(page, where, field)) - value) < 1e-6, (name, field)
        share = d["fragmented"] / d["free"] * 100 if d["free"] else 0.0
        assert abs(number(cell(page, where, "fragmentation")) - share) <= 0.051
    assert page.locator("#n-maps .node").count() == nodes["count"]
    devices = [d for n in nodes["nodes"] for d in n["gpus"]["devices"]]
    assert page.locator("#n-maps .d.idle").count() == sum(d["free"] >= 1 for d in devices)
    assert page.locator("#n-maps .d.shared").count() == sum(
        0 < d["free"] < 1 or (d["free"] == 0 and len(d["pods"]) > 1) for d in devices
    )
    total_free = sum(d["free"] for d in domains.values())
    shown_free = number(page.locator("#n-total [data-field='free']").inner_text())
    assert abs(shown_free - total_free) < 1e-6
    return nodes


def test_nodes_page_maps_every_gpu_by_topology_domain(
    browser: Browser, muster: httpx.Client
) -> None:
    with visit(browser, base(muster), "nodes", "demo cluster") as page:
        nodes = check_nodes_page(page, muster)
        domains = domains_of(nodes)
        assert {"zone-a / block-1", "zone-a / block-2", ""} <= set(domains)
        # The gang that does not fit holds room on the nodes that free soonest.
        assert domains["zone-a / block-1"]["held"] > 0
        assert page.locator("#n-maps .node.held").count() > 0
        # The shared devices are fragments: their nodes are outlined.
        fragmented = {
            n["name"] for n in nodes["nodes"]
            if any(0 < d["free"] < 1 for d in n["gpus"]["devices"])
        }  # fmt: skip
        assert fragmented
        outlined = page.locator("#n-maps .node.frag").evaluate_all(
            "tiles => tiles.map(t => t.dataset.node)"
        )
        assert set(outlined) == fragmented
        node = sorted(fragmented)[0]
        page.click(f"#n-maps .node[data-node='{node}']")
        page.wait_for_selector("#n-detail:not([hidden]) #n-devices")
        rows = page.locator("#n-devices tbody tr").count()
        assert rows == len(next(n for n in nodes["nodes"] if n["name"] == node)["gpus"]["devices"])
        page.goto(f"{base(muster)}/ui/#/nodes")
        page.screenshot(path=str(SHOTS / "nodes.png"), full_page=True)


@pytest.fixture(scope="module")
def decisions() -> Iterator[httpx.Client]:
    """A Muster whose journal holds plans, gangs started, a preemption, a barrier timeout and
    a rollback (the API server refuses one member's Binding)."""
    app = create_app(Settings(demo=True, bind_barrier_seconds=0.5))
    with running(app) as client:
        ks = KubeScheduler(client, DEMO_NODES)
        batch = [member(f"batch-{i}", "batch", 4, 8, "default", ns="batch") for i in range(4)]
        ks.schedule_gang(batch)
        urgent = [member(f"urgent-{i}", "urgent", 2, 8, "default") for i in range(2)]
        for pod in urgent:
            pod["spec"]["priority"] = 1000
        ks.schedule_gang(urgent)  # the planner evicts the whole batch gang for it
        half = [member(f"half-{i}", "half", 2, 1, "default") for i in range(2)]
        for pod in half:
            ks.filter(pod)
        node = ks.pick(half[0])
        assert node and "within 0.5s" in ks.bind(half[0], node)  # its partner never comes
        gateway = app.state.muster.gateway  # the in-memory API server of standalone mode
        gateway.fail[("bind", "ml/roll-1")] = GatewayError("Conflict", "the pod was changed")
        roll = [member(f"roll-{i}", "roll", 2, 1, "default") for i in range(2)]
        with pytest.raises(AssertionError, match="rolled back"):
            ks.schedule_gang(roll)
        yield client


def test_events_page_lists_recent_decisions_live(browser: Browser, decisions: httpx.Client) -> None:
    with visit(browser, base(decisions), "events", "demo cluster") as page:

        def rows_match() -> None:
            journal = decisions.get("/debug/events", params={"limit": 1000}).json()
            shown = page.locator("#e-table tbody tr").evaluate_all(
                "rows => rows.map(r => Number(r.dataset.seq))"
            )
            assert shown == [e["seq"] for e in reversed(journal["events"])]  # newest first
            for event in journal["events"]:
                where = f"#e-table tr[data-seq='{event['seq']}']"
                assert cell(page, where, "kind") == event["kind"]
                assert cell(page, where, "gang") == event["gang"]
                assert cell(page, where, "message") == event["message"]
                for victim in event["victims"]:
                    assert victim["unit"] in cell(page, where, "victims")
            for kind, count in journal["totals"]["counts"].items():
                if count:
                    assert page.locator(f"[data-total='{kind}']").inner_text() == str(count)

        eventually(rows_match)
        kinds = {e["kind"] for e in decisions.get("/debug/events").json()["events"]}
        assert {"plan", "gang-started", "preemption", "barrier-timeout", "rollback"} <= kinds
        page.screenshot(path=str(SHOTS / "events.png"), full_page=True)
        page.select_option("#e-kind", "preemption")
        shown = page.locator("#e-table tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.kind)"
        )
        assert shown == ["preemption"]
        page.select_option("#e-kind", "")
        # A new decision appears without a reload (the page polls with since=).
        ks = KubeScheduler(decisions, DEMO_NODES)
        ks.schedule_gang([member(f"late-{i}", "late", 2, 1, "default") for i in range(2)])
        page.wait_for_selector("#e-table tr[data-kind='gang-started']:has-text('ml/late')")
        eventually(rows_match)


def test_the_dashboard_is_served_from_the_package_without_the_internet(
    browser: Browser, muster: httpx.Client
) -> None:
    requested: list[str] = []
    with open_page(browser) as (page, console):
        page.on("request", lambda request: requested.append(request.url))
        for name in ("queues", "gangs", "nodes", "events"):
            show(page, base(muster), name)
            assert page.locator("h1").all_inner_texts() == [name.capitalize()]
            assert page.locator("table th[scope='col']").count() > 0
        assert requested and all(url.startswith(base(muster)) for url in requested), requested
        assert console.errors == []


def test_every_page_works_on_a_fresh_demo_server(browser: Browser) -> None:
    """`make demo` with nothing submitted yet: every page renders, says so, logs no error."""
    with running(create_app()) as client:
        for name in ("queues", "gangs", "nodes", "events"):
            with visit(browser, base(client), name, "empty demo cluster") as page:
                if name == "queues":
                    assert "no queue file" in page.locator("#q-meta").inner_text()
                    assert page.locator("#q-table tbody tr").count() == 1  # the open queue
                if name == "gangs":
                    assert page.locator("#g-empty").is_visible()
                if name == "nodes":
                    assert page.locator("#n-maps .node").count() == 9
                if name == "events":
                    assert page.locator("#e-empty").is_visible()


def test_screenshots_are_where_the_readme_shows_them() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name in ("queues", "gangs", "nodes", "events"):
        assert f"docs/ui/{name}.png" in readme
        assert (README_SHOTS / f"{name}.png").is_file()

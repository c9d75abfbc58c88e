"""The dashboard's files at /ui and the debug views it reads beyond /debug's snapshots:
/debug/queues/history, /debug/gangs/outlook and /debug/nodes?since=."""

from __future__ import annotations

import json
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from app.api.ui import ASSETS
from app.main import create_app
from app.settings import Settings
from tests.conftest import running
from tests.factories import pod_json

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["h100-0", "h100-1", "h100-2", "h100-3", "a100-0", "a100-1", "t4-0", "cpu-0", "cpu-1"]


def test_ui_serves_the_packaged_files_and_nothing_else() -> None:
    with running(create_app()) as client:
        root = client.get("/ui", follow_redirects=False)
        assert root.status_code == 307 and root.headers["location"] == "ui/"
        page = client.get("/ui/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert 'src="static/app.js"' in page.text
        for name in ("app.js", "queues.js", "gangs.js", "nodes.js", "events.js", "chart.js"):
            asset = client.get(f"/ui/static/{name}")
            assert asset.status_code == 200, name
            assert asset.headers["content-type"].startswith("text/javascript")
        css = client.get("/ui/static/style.css")
        again = client.get("/ui/static/style.css", headers={"if-none-match": css.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        for path in ("/ui/static/nope.js", "/ui/static/..%2Fapi%2Fui.py", "/ui/static/__init__.py"):
            assert client.get(path).status_code == 404, path


def test_every_dashboard_file_ships_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["app"]
    files = [p.relative_to(ROOT / "app").as_posix() for p in ASSETS.iterdir() if p.is_file()]
    assert "ui/index.html" in files
    assert all(any(fnmatch(f, pattern) for pattern in patterns) for f in files), files
    assert not [p for p in ASSETS.iterdir() if p.is_dir()]  # "ui/*" takes no subfolders


def test_queue_history_is_sampled_in_the_server(tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(
        "defaultQueue: a\nqueues:\n  - {name: a, guaranteed: {nvidia.com/gpu: 8}}\n  - {name: b}\n"
    )
    settings = Settings(demo=True, queue_file=queues, share_interval_seconds=3600)
    with running(create_app(settings)) as client:
        first = client.get("/debug/queues/history").json()
        assert first["resources"] == ["nvidia.com/gpu", "cpu", "memory"]
        assert first["intervalSeconds"] == 3600 and first["capacity"] == 720
        assert [s["seq"] for s in first["samples"]] == [1] and first["last"] == 1
        assert set(first["samples"][0]["queues"]) == {"a", "b"}
        assert client.get("/debug/queues/history", params={"since": 1}).json()["samples"] == []
        for query, field in (({"since": -1}, "since"), ({"limit": 0}, "limit")):
            bad = client.get("/debug/queues/history", params=query)
            assert bad.status_code == 422 and field in bad.text


def test_gangs_outlook_gives_each_gang_its_blocker_and_eta() -> None:
    labels = {"muster.io/pod-group": "llama", "muster.io/min-member": "3"}
    with running(create_app()) as client:
        pod = pod_json("llama-0", gpu=8, namespace="ml", labels=labels)
        client.post("/filter", content=json.dumps({"Pod": pod, "NodeNames": NAMES}))
        body = client.get("/debug/gangs/outlook").json()
        assert body["count"] == 1
        (gang,) = body["gangs"]
        explained = client.get("/explain/ml/gang/llama").json()
        assert gang == {
            "gang": "ml/llama",
            "queue": "default",
            "state": "waiting",
            "category": "gang-incomplete",
            "summary": explained["summary"],
            "eta_seconds": None,
            "explain": "/explain/ml/gang/llama",
        }


def test_nodes_since_a_generation_is_a_cheap_no_op() -> None:
    with running(create_app()) as client:
        full = client.get("/debug/nodes").json()
        assert full["count"] == 9 and "kubernetes.io/hostname" in full["topologyKeys"]
        same = client.get("/debug/nodes", params={"since": full["generation"]}).json()
        assert same == {"generation": full["generation"], "unchanged": True}
        pod = pod_json("notebook", gpu=1)
        client.post("/filter", content=json.dumps({"Pod": pod, "NodeNames": NAMES}))
        bind = {"PodName": "notebook", "PodNamespace": "default",
                "PodUID": pod["metadata"]["uid"], "Node": "a100-0"}  # fmt: skip
        assert client.post("/bind", content=json.dumps(bind)).json() == {"Error": ""}
        changed = client.get("/debug/nodes", params={"since": full["generation"]}).json()
        assert changed["generation"] > full["generation"] and changed["count"] == 9
        assert client.get("/debug/nodes", params={"since": -1}).status_code == 422

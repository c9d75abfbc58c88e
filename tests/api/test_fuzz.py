"""Fuzzing against the published API description, on a real uvicorn server on 127.0.0.1.

* schemathesis (dev extras) reads ``/openapi.json`` and runs every operation - extender verbs,
  webhooks, debug, explain, what-if, health, metrics - through all its phases with all its
  checks (``--checks all``): no server error, every status code, content type and body as
  documented, every schema-valid request accepted and every schema-violating one refused;
  plus ours (``fuzz_hooks.py``): every 4xx names its field. A fixed seed and a fixed number of
  examples per operation bound the run and make it reproducible; the figures are printed.
* The AdmissionReview endpoints get well-formed reviews around malformed pods (hypothesis):
  the answer is always a review (200) echoing the uid, and a pod Muster cannot read is named.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import certs
from app.main import create_app
from app.server import plan_listeners
from app.settings import Settings
from tests.conftest import free_port, running
from tests.https import LOOPBACK, running_server

#: Examples per operation in schemathesis' fuzzing phase (its coverage phase adds its own
#: boundary cases: about 5 000 requests in all, well under a minute here).
MAX_EXAMPLES = 25
SEED = 20261125
ROOT = Path(__file__).resolve().parents[2]


def schemathesis_binary() -> str:
    found = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    found = found or shutil.which("schemathesis")
    assert found, "schemathesis is not installed: pip install -e '.[dev]' (or `make venv`)"
    return found


@pytest.fixture(scope="module")
def server() -> Iterator[httpx.Client]:
    with running(create_app()) as client:
        yield client


def fuzz(
    document: str, tmp_path: Path, *extra: str, examples: int = MAX_EXAMPLES
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], list[str]]:
    """Run schemathesis with all checks (ours included) on ``document``; the process, its JSON
    report and the status codes our field check saw."""
    report, checked = tmp_path / "run.json", tmp_path / "checked-4xx"
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.api.fuzz_hooks",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "MUSTER_FUZZ_CHECKED": str(checked),
    }
    argv = [
        schemathesis_binary(), "run", document, "--checks", "all",
        "--max-examples", str(examples), "--seed", str(SEED),
        "--request-timeout", "30", "--no-color",
        "--report", "json", "--report-json-path", str(report), *extra,
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900, check=False)  # fmt: skip
    assert report.exists(), done.stdout[-4000:] + done.stderr[-2000:]
    named = checked.read_text().split() if checked.exists() else []
    return done, json.loads(report.read_text()), named


def test_schemathesis_finds_nothing_with_all_checks(server: httpx.Client, tmp_path: Path) -> None:
    done, run, named = fuzz(f"{server.base_url}/openapi.json", tmp_path)
    cases = run["test_cases"]
    print(  # the figures the README quotes
        f"schemathesis {run['schemathesis_version']}: {run['operations']['tested']} operations, "
        f"{cases['generated']} cases generated, {cases['with_failures']} with failures, "
        f"{cases['errored']} errored, {len(named)} 4xx answers checked for their field, "
        f"{run['running_time']:.0f} s"
    )
    assert done.returncode == 0, done.stdout[-6000:]
    assert run["complete"] and run["exit_code"] == 0
    assert run["operations"]["tested"] == run["operations"]["total"] == len(
        [op for path in server.get("/openapi.json").json()["paths"].values() for op in path]
    )
    assert all(p["status"] == "success" for p in run["phases"].values()), run["phases"]
    assert (cases["with_failures"], cases["unique_failures"], cases["errored"]) == (0, 0, 0)
    assert run["failures"] == [] and run["errors"] == []
    # Warnings are part of honesty too: unresolvable references, a schema the validation
    # disagrees with, operations rarely given a valid request.
    assert {k: v for k, v in run["warnings"].items() if v} == {}
    assert cases["generated"] > 1000
    assert {"400", "422"} <= set(named), "the field check did not run (SCHEMATHESIS_HOOKS)"


def test_schemathesis_through_the_mutual_tls_extender_listener(tmp_path: Path) -> None:
    """deploy/'s listeners: the document from the ops port, the extender verbs fuzzed on the
    extender port over mutual TLS with kube-scheduler's certificate from ``muster certs``."""
    ca = certs.make_ca()
    serving = certs.issue(ca, certs.service_names("muster", "muster-system"), [LOOPBACK])
    pki = tmp_path / "pki"
    certs.write(pki, ca, serving, certs.issue_client(ca))
    port, ops = free_port(), free_port()
    settings = Settings(demo=True, tls_cert=pki / "tls.crt", tls_key=pki / "tls.key",
                        client_ca=pki / "ca.crt", webhook_port=free_port(),
                        ops_listen=f"{LOOPBACK}:{ops}")  # fmt: skip
    with running_server(create_app(settings), plan_listeners(settings, LOOPBACK, port)):
        done, run, named = fuzz(
            f"http://{LOOPBACK}:{ops}/openapi.json", tmp_path, "--url",
            f"https://{LOOPBACK}:{port}", "--include-tag", "extender",
            "--request-cert", str(pki / "client.crt"), "--request-cert-key",
            str(pki / "client.key"), "--tls-verify", str(pki / "ca.crt"), examples=10,
        )  # fmt: skip
    cases = run["test_cases"]
    print(f"over mutual TLS: {run['operations']['tested']} operations, {cases['generated']} "
          f"cases generated, {cases['with_failures']} with failures")  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:]
    assert run["operations"]["tested"] == 4  # filter, prioritize, preempt, bind
    assert (cases["with_failures"], cases["errored"]) == (0, 0) and cases["generated"] > 100
    assert "422" in named


class Answer:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status_code, self.body = status, body

    def json(self) -> dict[str, Any]:
        return self.body


@pytest.mark.parametrize(
    ("status", "body", "good"),
    [
        (422, {"error": "Pod.metadata.name: missing", "field": "Pod.metadata.name"}, True),
        (422, {"error": "one of NodeNames or Nodes is required", "field": ""}, False),
        (422, {"error": "missing", "field": "Pod"}, False),
        (400, {"error": "malformed JSON: EOF", "field": ""}, True),
        (400, {"error": "not an AdmissionReview: request.uid: too short", "field": ""}, False),
        (400, {"detail": "bad"}, False),
        (200, {}, None),
    ],
)
def test_the_field_check_itself(status: int, body: dict[str, Any], good: bool | None) -> None:
    from tests.api.fuzz_hooks import four_xx_names_its_field

    if good is False:
        with pytest.raises(AssertionError):
            four_xx_names_its_field(None, Answer(status, body), None)
    else:
        assert four_xx_names_its_field(None, Answer(status, body), None) is good or good is None


def test_the_document_has_no_dangling_references_and_every_answer_is_described(
    server: httpx.Client,
) -> None:
    document = server.get("/openapi.json").json()
    text = json.dumps(document)
    schemas = document.get("components", {}).get("schemas", {})
    for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    assert "#/$defs/" not in text
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            if method == "post":
                assert {"200", "400"} <= codes, (path, codes)
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                assert body.get("properties"), path
            if "parameters" in operation or path == "/whatif":
                assert "422" in codes, (path, codes)
            for code in {c for c in codes if c[0] in "45"}:
                content = operation["responses"][code]["content"]["application/json"]
                schema = content["schema"]
                assert "$ref" in schema or "properties" in schema, (path, code)
    metrics = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert set(metrics) == {"text/plain"}


# -- AdmissionReviews around malformed pods ---------------------------------------------------

REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "fuzz",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team-a",
        "operation": "CREATE",
        "object": {
            "metadata": {"name": "p", "namespace": "team-a",
                         "labels": {"muster.io/pod-group": "g", "muster.io/min-member": "2"}},
            "spec": {"containers": [{"name": "c", "resources": {
                "requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
        },
    },
}  # fmt: skip

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
#: Where a pod goes wrong: the pod itself, its parts, and the parts Muster reads.
PLACES = [
    (), ("metadata",), ("metadata", "name"), ("metadata", "labels"),
    ("metadata", "labels", "muster.io/min-member"),
    ("metadata", "labels", "muster.io/gpu-fraction"),
    ("metadata", "annotations"), ("metadata", "annotations", "muster.io/gpu-fraction"),
    ("metadata", "ownerReferences"), ("metadata", "creationTimestamp"), ("spec",),
    ("spec", "containers"), ("spec", "containers", 0), ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"),
    ("spec", "priority"), ("spec", "schedulerName"), ("spec", "nodeName"), ("spec", "affinity"),
    ("spec", "tolerations"), ("status",),
]  # fmt: skip


def _set(obj: Any, place: tuple[Any, ...], value: Any) -> Any:
    if not place:
        return value
    target = obj
    for key in place[:-1]:
        if isinstance(key, int):
            target = target[key]
        else:
            target = target.setdefault(key, {})
    target[place[-1]] = value
    return obj


def _check(response: httpx.Response, path: str) -> None:
    assert response.status_code == 200, response.text
    review = response.json()
    assert (review["apiVersion"], review["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    answer = review["response"]
    assert answer["uid"] == "fuzz"
    unreadable = [w for w in answer.get("warnings", []) if "cannot read the pod" in w]
    if path == "/mutate":
        assert answer["allowed"] is True
        for warning in unreadable:  # names the field: "...: request.object.<path>: problem"
            assert ": request.object" in warning, warning
    elif not answer["allowed"]:
        assert answer["status"]["code"] == 403 and answer["status"]["message"]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    path=st.sampled_from(["/mutate", "/validate"]),
    place=st.sampled_from(PLACES),
    value=json_values,
)
def test_reviews_of_malformed_pods_always_get_a_review_back(
    server: httpx.Client, path: str, place: tuple[Any, ...], value: Any
) -> None:
    body = copy.deepcopy(REVIEW)
    body["request"]["object"] = _set(body["request"]["object"], place, value)
    response = server.post(path, json=body)
    if not place and not isinstance(value, dict | None):
        # Not an object at all: the review itself is malformed (its schema says so).
        assert response.status_code == 400, response.text
        assert response.json()["field"] == "request.object"
        return
    _check(response, path)


def test_reviews_of_pods_drawn_from_the_published_pod_schema(server: httpx.Client) -> None:
    """Pods the document calls valid (schemathesis draws /filter bodies from it) get a review
    back from both webhooks, and /filter accepts them."""
    import schemathesis

    document = server.get("/openapi.json").json()
    filter_bodies = schemathesis.openapi.from_dict(document)["/filter"]["POST"].as_strategy()

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=filter_bodies, path=st.sampled_from(["/mutate", "/validate"]))
    def check(case: Any, path: str) -> None:
        pod = case.body["Pod"]
        body = copy.deepcopy(REVIEW)
        body["request"]["object"] = pod
        _check(server.post(path, json=body), path)
        answer = server.post("/filter", json={"Pod": pod, "NodeNames": ["h100-0"]})
        assert answer.status_code == 200, answer.text

    check()

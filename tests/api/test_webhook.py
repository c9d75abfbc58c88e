"""The webhooks over HTTP: AdmissionReview shapes, the base64 JSONPatch, warnings, refusals,
and 400 (never 500) for anything that is not an AdmissionReview."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.admission.pods import Fetched, NamespaceMeta
from app.core.admission.workloads import WorkloadKind
from app.core.model.values import Pod, Resources
from app.main import create_app
from app.services import build_services
from app.settings import Settings
from tests.conftest import running
from tests.reviews import apply_patch, job_obj, job_pod, pod, review

UID = "705ab4f5-6393-11e8-b7cc-42010a800002"


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with running(create_app()) as c:
        yield c


def post(client: httpx.Client, path: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(path, content=content, headers={"Content-Type": "application/json"})


def answer(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    return body["response"]


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def test_mutate_answers_a_base64_json_patch_and_echoes_the_uid(client: httpx.Client) -> None:
    obj = pod(gpu=1, annotations={"scheduling.k8s.io/group-name": "vc",
                                  "scheduling.volcano.sh/group-min-member": "2"})  # fmt: skip
    response = answer(post(client, "/mutate?timeout=2s", review(obj, uid=UID)))
    assert response["uid"] == UID and response["allowed"] is True
    assert "warnings" not in response
    patched = apply_patch(obj, decoded_patch(response))
    assert patched["spec"]["schedulerName"] == "muster"
    assert patched["metadata"]["labels"] == {
        "muster.io/pod-group": "vc",
        "muster.io/min-member": "2",
    }
    again = answer(post(client, "/mutate", review(patched, uid=UID)))
    assert again == {"uid": UID, "allowed": True}


def test_unclassifiable_pod_is_allowed_with_warnings(client: httpx.Client) -> None:
    # Standalone mode cannot read the Job: the pod is admitted, partly tagged, and told why.
    response = answer(post(client, "/mutate", review(job_pod("train"), uid=UID)))
    assert response["allowed"] is True
    assert response["warnings"] == [
        "muster: ml/train-*: cannot size Job ml/train (Muster runs standalone, without access "
        "to the API server); the pod is scheduled on its own, without muster.io/pod-group"
    ]
    patched = apply_patch(job_pod("train"), decoded_patch(response))
    assert patched["spec"]["schedulerName"] == "muster"
    assert "muster.io/pod-group" not in patched["metadata"]["labels"]


def test_untouched_pods_get_a_bare_allowed(client: httpx.Client) -> None:
    for obj in (pod(), pod(namespace="kube-system", gpu=8)):
        assert answer(post(client, "/mutate", review(obj, uid=UID))) == {
            "uid": UID,
            "allowed": True,
        }


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
@pytest.mark.parametrize(
    "change",
    [
        lambda r: r["request"].update(operation="UPDATE"),
        lambda r: r["request"].update(operation="DELETE", object=None),
        lambda r: r["request"].update(kind={"group": "batch", "version": "v1", "kind": "Job"}),
        lambda r: r["request"].update(subResource="status"),
    ],
    ids=["update", "delete", "not-a-pod", "subresource"],
)
def test_other_reviews_are_allowed_untouched(client: httpx.Client, path: str, change: Any) -> None:
    body = review(pod(gpu=1, labels={"muster.io/min-member": "9", "muster.io/max-member": "1",
                                     "muster.io/pod-group": "g"}), uid=UID)  # fmt: skip
    change(body)
    assert answer(post(client, path, body)) == {"uid": UID, "allowed": True}


def broken(mutation: Any) -> dict[str, Any]:
    body = review(pod(gpu=1), uid=UID)
    mutation(body)
    return body


BAD: list[tuple[str, Any, str]] = [
    ("empty", "", "empty request body"),
    ("not JSON", "{nope", "malformed JSON"),
    ("a list", "[]", "not an AdmissionReview"),
    ("no request", broken(lambda b: b.pop("request")), "request"),
    ("no uid", broken(lambda b: b["request"].pop("uid")), "request.uid"),
    ("empty uid", broken(lambda b: b["request"].update(uid="")), "request.uid"),
    ("no kind", broken(lambda b: b["request"].pop("kind")), "request.kind"),
    ("object not an object", broken(lambda b: b["request"].update(object=[1])), "request.object"),
    ("v1beta1", broken(lambda b: b.update(apiVersion="admission.k8s.io/v1beta1")), "v1beta1"),
    ("other kind", broken(lambda b: b.update(kind="ConversionReview")), "ConversionReview"),
    ("uid a number", broken(lambda b: b["request"].update(uid=5)), "request.uid"),
    ("dryRun a string", broken(lambda b: b["request"].update(dryRun="yes")), "request.dryRun"),
]

#: Well-formed reviews of pods Muster cannot read.
UNREADABLE: list[tuple[str, Any, str]] = [
    ("pod missing", broken(lambda b: b["request"].pop("object")), "request.object: missing"),
    (
        "labels not strings",
        broken(lambda b: b["request"]["object"]["metadata"].update(labels={"a": 1})),
        "request.object.metadata.labels.a: expected a string",
    ),
    (
        "gpu quantity",
        broken(
            lambda b: b["request"]["object"]["spec"]["containers"][0]["resources"].update(
                requests={"nvidia.com/gpu": "many"}
            )
        ),  # fmt: skip
        "request.object.spec.containers[0].resources.requests.nvidia.com/gpu",
    ),
]


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
@pytest.mark.parametrize(("name", "body", "message"), BAD, ids=[b[0] for b in BAD])
def test_unparsable_review_is_400_naming_the_problem(
    client: httpx.Client, path: str, name: str, body: Any, message: str
) -> None:
    response = post(client, path, body)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]
    assert response.json()["field"] or name in ("empty", "not JSON", "a list")


@pytest.mark.parametrize(("name", "body", "message"), UNREADABLE, ids=[u[0] for u in UNREADABLE])
def test_an_unreadable_pod_is_admitted_by_mutate_and_refused_by_validate_naming_the_field(
    client: httpx.Client, name: str, body: Any, message: str
) -> None:
    """The API server sends well-typed pods; a pod Muster cannot read (a bad GPU share, say)
    is one it could never schedule. kubectl shows the mutating webhook's warning; the validating
    webhook refuses it."""
    mutated = answer(post(client, "/mutate", body))
    assert mutated["allowed"] is True and "patch" not in mutated
    (warning,) = mutated["warnings"]
    assert warning.startswith("muster: cannot read the pod: ") and message in warning, warning
    assert warning.endswith("; admitted unmodified")
    validated = answer(post(client, "/validate", body))
    assert validated["allowed"] is False
    assert validated["status"]["code"] == 403
    assert message in validated["status"]["message"]


# -- cluster-mode wiring (readers injected) --------------------------------------------------


class Owners:
    """An ``OwnerReader`` over a table; ``peek`` knows what was read before (like the cache)."""

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects
        self.calls = 0
        self.read: dict[str, Fetched] = {}

    def __call__(self, kind: WorkloadKind, namespace: str, name: str) -> Fetched:
        self.calls += 1
        obj = self.objects.get(name)
        answer = Fetched(obj) if obj else Fetched(None, f'{kind.resource} "{name}" not found')
        self.read[name] = answer
        return answer

    def peek(self, kind: WorkloadKind, namespace: str, name: str) -> Fetched | None:
        return self.read.get(name)


class Namespaces:
    """A ``NamespaceReader``: namespace ``ml`` is managed, with a default queue."""

    def __call__(self, name: str) -> NamespaceMeta:
        return NamespaceMeta(
            labels={"muster.io/managed": "true"} if name == "ml" else {},
            annotations={"muster.io/default-queue": "team-ml"} if name == "ml" else {},
        )

    def peek(self, name: str) -> NamespaceMeta | None:
        return self(name)


def member(name: str, labels: dict[str, str]) -> Pod:
    return Pod(uid=f"uid-{name}", namespace="ml", name=name, requests=Resources(), labels=labels)


@pytest.fixture
def cluster_like() -> Iterator[tuple[httpx.Client, Any]]:
    """A server whose services read owners and namespaces from fakes, as in cluster mode."""
    services = build_services(Settings(demo=True))
    services.owners = Owners({"train": job_obj("train", parallelism=3)})
    services.namespaces = Namespaces()
    with running(create_app(services=services)) as c:
        yield c, services


def test_mutate_reads_owner_and_namespace(cluster_like: tuple[httpx.Client, Any]) -> None:
    client, services = cluster_like
    response = answer(post(client, "/mutate", review(job_pod("train"), uid=UID)))
    labels = apply_patch(job_pod("train"), decoded_patch(response))["metadata"]["labels"]
    assert (labels["muster.io/pod-group"], labels["muster.io/min-member"]) == ("train", "3")
    assert labels["muster.io/queue"] == "team-ml"
    cpu_pod = pod(labels={"app": "web"})  # a managed namespace takes every pod
    response = answer(post(client, "/mutate", review(cpu_pod, uid=UID)))
    assert apply_patch(cpu_pod, decoded_patch(response))["spec"]["schedulerName"] == "muster"
    other = pod(namespace="web", labels={"app": "web"})
    assert answer(post(client, "/mutate", review(other, uid=UID))) == {"uid": UID, "allowed": True}
    # The Job was read once (in a worker thread); the next pods of the gang use the cache.
    response = answer(post(client, "/mutate", review(job_pod("train"), uid=UID)))
    assert (
        apply_patch(job_pod("train"), decoded_patch(response))["metadata"]["labels"][
            "muster.io/min-member"
        ]
        == "3"
    )
    assert services.owners.calls == 1


def test_mutate_keeps_the_min_member_live_members_agree_on(
    cluster_like: tuple[httpx.Client, Any],
) -> None:
    client, services = cluster_like
    services.cache.upsert_pods(
        [
            member(f"old-{i}", {"muster.io/pod-group": "train", "muster.io/min-member": "2"})
            for i in range(2)
        ]  # fmt: skip
    )
    response = answer(post(client, "/mutate", review(job_pod("train"), uid=UID)))
    labels = apply_patch(job_pod("train"), decoded_patch(response))["metadata"]["labels"]
    assert labels["muster.io/min-member"] == "2"
    assert "keeps 2" in response["warnings"][0]


GANG = {"muster.io/pod-group": "llama", "muster.io/min-member": "4"}


@pytest.mark.parametrize(
    ("labels", "members", "refusal"),
    [
        ({**GANG, "muster.io/max-member": "2"}, [], "max-member=2 is below the min-member 4"),
        (GANG, [{**GANG, "muster.io/min-member": "8"}] * 3,
         "this pod says min-member 4 but the gang's live members disagree (3 say 8)"),
        (GANG, [GANG] * 3, ""),
        ({"muster.io/pod-group": "llama"}, [GANG], ""),
        ({}, [], ""),
    ],
)  # fmt: skip
def test_validate(
    cluster_like: tuple[httpx.Client, Any],
    labels: dict[str, str],
    members: list[dict[str, str]],
    refusal: str,
) -> None:
    client, services = cluster_like
    services.cache.upsert_pods([member(f"m-{i}", m) for i, m in enumerate(members)])
    response = answer(post(client, "/validate", review(pod(gpu=1, labels=labels), uid=UID)))
    assert response["uid"] == UID
    if refusal:
        assert response["allowed"] is False
        assert response["status"]["code"] == 403
        assert refusal in response["status"]["message"]
    else:
        assert response == {"uid": UID, "allowed": True}


# -- fuzz: nothing a client sends gives a 500 ------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
TEMPLATE = review(job_pod("fuzz", labels={"muster.io/pod-group": "g"}), uid=UID)
PLACES = [
    ("request", "uid"),
    ("request", "namespace"),
    ("request", "operation"),
    ("request", "object"),
    ("request", "object", "metadata"),
    ("request", "object", "metadata", "labels"),
    ("request", "object", "metadata", "annotations"),
    ("request", "object", "metadata", "ownerReferences"),
    ("request", "object", "spec"),
    ("request", "object", "spec", "containers"),
    ("request", "object", "spec", "schedulerName"),
    ("request", "object", "spec", "nodeName"),
]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    path=st.sampled_from(["/mutate", "/validate"]),
    place=st.sampled_from(PLACES),
    value=json_values,
)
def test_never_a_500(client: httpx.Client, path: str, place: tuple[str, ...], value: Any) -> None:
    body = copy.deepcopy(TEMPLATE)
    target = body
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = value
    response = post(client, path, body)
    assert response.status_code in (200, 400), response.text
    if place[:2] == ("request", "object") and len(place) > 2:
        # The envelope is intact: whatever the pod holds, a review gets a review back.
        assert response.status_code == 200, response.text


class Broken:
    """A reader with a bug."""

    def __call__(self, *args: Any) -> Fetched:
        raise RuntimeError("bug")

    def peek(self, *args: Any) -> Fetched | None:
        raise RuntimeError("bug")


def test_a_bug_admits_the_pod_unmodified_with_a_warning(
    cluster_like: tuple[httpx.Client, Any], caplog: pytest.LogCaptureFixture
) -> None:
    client, services = cluster_like
    services.owners = Broken()
    response = answer(post(client, "/mutate", review(job_pod("train"), uid=UID)))
    assert response == {
        "uid": UID,
        "allowed": True,
        "warnings": [
            "muster: internal error in the webhook (see Muster's log); the pod is admitted "
            "unmodified"
        ],
    }
    assert "mutating webhook failed" in caplog.text

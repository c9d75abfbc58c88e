"""The admission webhooks on a real kube-apiserver 1.20, and deploy/ accepted by it.

Muster runs in cluster mode and serves the webhooks over HTTPS on 127.0.0.1 with a CA made by
``app.certs``. The webhook configurations registered are the shipped ones (deploy/webhooks.yaml)
with the Service swapped for ``url: https://127.0.0.1:PORT``; their caBundle is written by
``muster certs --patch``'s code. Pods are created through the API with ownerReferences to a Job
and to a JobSet (a CRD registered here), then read back from the API server.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import kubernetes.client
import pytest
import yaml
from controlplane import REPO_ROOT, ControlPlane, wait_for
from kubernetes.client.exceptions import ApiException

from app import certs
from app.k8s.webhooks import patch_ca_bundle
from app.main import create_app
from app.settings import Settings
from tests.https import LOOPBACK, serving
from tests.reviews import jobset_obj, pod, ray_pod

DEPLOY = REPO_ROOT / "deploy"
WEBHOOK_CONFIG = "muster-e2e"
G, M, Q = "muster.io/pod-group", "muster.io/min-member", "muster.io/queue"

JOBSET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "jobsets.jobset.x-k8s.io"},
    "spec": {
        "group": "jobset.x-k8s.io",
        "scope": "Namespaced",
        "names": {
            "plural": "jobsets",
            "singular": "jobset",
            "kind": "JobSet",
            "listKind": "JobSetList",
        },  # fmt: skip
        "versions": [
            {
                "name": "v1alpha2",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


@dataclass
class Cluster:
    cp: ControlPlane
    api: kubernetes.client.ApiClient
    core: kubernetes.client.CoreV1Api
    muster: Any  # the app's services
    http: httpx.Client


def _webhook_configs(port: int) -> list[dict[str, Any]]:
    """deploy/webhooks.yaml with each Service reference swapped for a loopback URL (and another
    name: the dry run of deploy/ below must not collide with them)."""
    configs = [d for d in yaml.safe_load_all((DEPLOY / "webhooks.yaml").read_text()) if d]
    for config in configs:
        config["metadata"]["name"] = WEBHOOK_CONFIG
        for webhook in config["webhooks"]:
            path = webhook["clientConfig"].pop("service")["path"]
            webhook["clientConfig"]["url"] = f"https://{LOOPBACK}:{port}{path}"
    return configs


def _register_crd(api: kubernetes.client.ApiClient) -> None:
    ext = kubernetes.client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(JOBSET_CRD)

    def established() -> bool:
        crd = ext.read_custom_resource_definition(JOBSET_CRD["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True"
                   for c in crd.status.conditions or [])  # fmt: skip

    wait_for(established, 30, "the JobSet CRD to be established")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    workdir = Path(tempfile.mkdtemp(prefix="muster-webhook-e2e-"))
    cp = ControlPlane()
    try:
        cp.start()
        api = cp.api_client()
        core = kubernetes.client.CoreV1Api(api)
        ca = certs.make_ca()
        certs.write(workdir, ca, certs.issue(ca, ["localhost"], [LOOPBACK]))
        app = create_app(Settings(mode="cluster"), api_client=cp.api_client())
        with (
            serving(app, workdir / "tls.crt", workdir / "tls.key") as served,
            httpx.Client(base_url=served.http_url, timeout=10) as http,
        ):
            wait_for(lambda: http.get("/readyz").status_code == 200, 30, "Muster to sync")
            admission = kubernetes.client.AdmissionregistrationV1Api(api)
            mutating, validating = _webhook_configs(served.https_port)
            admission.create_mutating_webhook_configuration(mutating)
            admission.create_validating_webhook_configuration(validating)
            # What `muster certs --patch` does, against the real API server.
            report = patch_ca_bundle(api, WEBHOOK_CONFIG, certs.ca_bundle(ca))
            assert len(report) == 2 and all("caBundle set on 1" in line for line in report)
            _register_crd(api)
            core.create_namespace({"metadata": {"name": "probe"}})
            _await_webhooks(core)
            yield Cluster(cp, api, core, app.state.muster, http)
        api.close()
    finally:
        cp.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _await_webhooks(core: kubernetes.client.CoreV1Api) -> None:
    """The API server picks up new webhook configurations asynchronously: probe with dry runs."""

    def mutating() -> bool:
        probe = core.create_namespaced_pod("probe", pod(namespace="probe", gpu=1), dry_run="All")
        return probe.spec.scheduler_name == "muster"

    def validating() -> bool:
        bad = pod(namespace="probe", labels={G: "x", M: "4", "muster.io/max-member": "2"})
        try:
            core.create_namespaced_pod("probe", bad, dry_run="All")
        except ApiException as exc:
            return "max-member" in (exc.body or "")
        return False

    wait_for(mutating, 30, "the mutating webhook to be called", interval=0.1)
    wait_for(validating, 30, "the validating webhook to be called", interval=0.1)


def namespace(core: kubernetes.client.CoreV1Api, name: str, **meta: Any) -> str:
    core.create_namespace({"metadata": {"name": name, **meta}})
    return name


def create(core: kubernetes.client.CoreV1Api, obj: dict[str, Any]) -> tuple[dict, list[str]]:
    """Create a pod; return it as the API server stored it (read back) and the admission
    warnings the API server relayed (``Warning: 299 - "..."`` headers)."""
    ns = obj["metadata"]["namespace"]
    response = core.create_namespaced_pod(ns, obj, _preload_content=False)
    warnings = [_warning_text(h) for h in response.headers.getlist("Warning")]
    name = json.loads(response.data)["metadata"]["name"]
    stored = core.read_namespaced_pod(name, ns, _preload_content=False)
    return json.loads(stored.data), warnings


def _warning_text(header: str) -> str:
    """The text of an RFC 7234 warning header as kube-apiserver sends it: ``299 - "text"``."""
    match = re.fullmatch(r'299 - "((?:[^"\\]|\\.)*)"', header)
    assert match, header
    return re.sub(r"\\(.)", r"\1", match.group(1))


def muster_labels(stored: dict[str, Any]) -> dict[str, str]:
    labels = stored["metadata"].get("labels") or {}
    return {k: v for k, v in labels.items() if k.startswith("muster.io/")}


def owned_by(obj: dict[str, Any], api_version: str, kind: str, name: str, uid: str) -> dict:
    obj = copy.deepcopy(obj)
    ref = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


def test_job_pods_get_gang_queue_and_scheduler(cluster: Cluster) -> None:
    core = cluster.core
    ns = namespace(core, "train", annotations={"muster.io/default-queue": "team-a"})
    job = kubernetes.client.BatchV1Api(cluster.api).create_namespaced_job(ns, {
        "metadata": {"name": "llm"},
        "spec": {"parallelism": 3, "completions": 3, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "m", "image": "pause"}]}}},
    })  # fmt: skip
    for _ in range(3):
        template = pod(namespace=ns, generate_name="llm-", gpu=1,
                       labels={"job-name": "llm", "controller-uid": job.metadata.uid})  # fmt: skip
        stored, warnings = create(core, owned_by(template, "batch/v1", "Job", "llm",
                                                 job.metadata.uid))  # fmt: skip
        assert warnings == []
        assert stored["spec"]["schedulerName"] == "muster"
        assert muster_labels(stored) == {G: "llm", M: "3", Q: "team-a"}
        assert stored["metadata"]["labels"]["job-name"] == "llm"


def test_jobset_pods_are_sized_from_the_jobset_crd(cluster: Cluster) -> None:
    core = cluster.core
    ns = namespace(core, "jobs")
    custom = kubernetes.client.CustomObjectsApi(cluster.api)
    obj = jobset_obj("pretrain", [("driver", 1, 1), ("workers", 2, 4)],
                     labels={"kueue.x-k8s.io/queue-name": "research"})  # fmt: skip
    obj["metadata"]["namespace"] = ns
    custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", obj)
    labels = {"jobset.sigs.k8s.io/jobset-name": "pretrain",
              "jobset.sigs.k8s.io/replicatedjob-name": "workers"}  # fmt: skip
    template = pod(namespace=ns, generate_name="pretrain-workers-0-", gpu=8, labels=labels)
    stored, warnings = create(core, owned_by(template, "batch/v1", "Job", "pretrain-workers-0",
                                             "child-job-uid"))  # fmt: skip
    assert warnings == []
    assert stored["spec"]["schedulerName"] == "muster"
    assert muster_labels(stored) == {G: "pretrain", M: "9", Q: "research"}


def test_pod_of_a_kind_whose_crd_is_absent_is_admitted_with_a_warning(cluster: Cluster) -> None:
    core = cluster.core
    ns = namespace(core, "ray")
    obj = ray_pod("rc")
    obj["metadata"]["namespace"] = ns
    stored, warnings = create(core, obj)
    assert stored["spec"]["schedulerName"] == "muster"
    assert G not in (stored["metadata"].get("labels") or {})
    assert len(warnings) == 1, warnings
    assert (
        "cannot size RayCluster ray/rc (the API server does not serve rayclusters.ray.io/v1"
        in (warnings[0])
    )
    # An owner that does not exist: the API server's NotFound, in the warning.
    orphan = pod(namespace=ns, generate_name="orphan-", gpu=1)
    stored, warnings = create(core, owned_by(orphan, "batch/v1", "Job", "ghost", "ghost-uid"))
    assert stored["spec"]["schedulerName"] == "muster"
    assert (
        len(warnings) == 1
        and 'cannot size Job ray/ghost (jobs.batch "ghost" not found)' in (warnings[0])
    )


@pytest.mark.parametrize(
    ("ns", "ns_labels", "obj_kwargs", "scheduler", "labels"),
    [
        ("kube-system", None, {"gpu": 1}, "default-scheduler", {}),
        ("web", None, {"labels": {"app": "web"}}, "default-scheduler", {}),
        ("optout", None, {"gpu": 1, "labels": {"muster.io/managed": "false"}},
         "default-scheduler", {"muster.io/managed": "false"}),
        ("managed", {"muster.io/managed": "true"}, {"labels": {"app": "web"}}, "muster", {}),
        ("off", {"muster.io/managed": "false"}, {"gpu": 1}, "default-scheduler", {}),
        ("volcano", None, {"gpu": 1, "scheduler": "volcano", "annotations": {
            "scheduling.k8s.io/group-name": "vj",
            "scheduling.volcano.sh/group-min-member": "2"}}, "muster", {G: "vj", M: "2"}),
    ],
)  # fmt: skip
def test_which_pods_are_touched(
    cluster: Cluster,
    ns: str,
    ns_labels: dict[str, str] | None,
    obj_kwargs: dict[str, Any],
    scheduler: str,
    labels: dict[str, str],
) -> None:
    core = cluster.core
    if ns != "kube-system":
        namespace(core, ns, labels=ns_labels or {})
    stored, warnings = create(core, pod(namespace=ns, **obj_kwargs))
    assert warnings == []
    assert stored["spec"]["schedulerName"] == scheduler
    assert muster_labels(stored) == labels


def test_validate_rejects_contradicting_gang_labels(cluster: Cluster) -> None:
    core = cluster.core
    ns = namespace(core, "gangs")
    for i in range(2):
        create(core, pod(namespace=ns, name=f"a-{i}", gpu=1, labels={G: "g", M: "2"}))

    def cached() -> bool:
        pods = cluster.muster.cache.snapshot().pods.values()
        return sum(p.namespace == ns for p in pods) == 2

    wait_for(cached, 30, "Muster's cache to see the gang's members")
    with pytest.raises(ApiException) as exc:
        create(core, pod(namespace=ns, name="a-2", gpu=1, labels={G: "g", M: "3"}))
    assert exc.value.status == 403
    message = json.loads(exc.value.body)["message"]
    assert message.startswith('admission webhook "validate.muster.io" denied the request: ')
    assert "this pod says min-member 3 but the gang's live members disagree (2 say 2)" in message
    stored, _ = create(core, pod(namespace=ns, name="a-3", gpu=1, labels={G: "g", M: "2"}))
    assert muster_labels(stored) == {G: "g", M: "2"}


# -- deploy/ ----------------------------------------------------------------------------------


def kubectl(cluster: Cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    binary = shutil.which("kubectl")
    assert binary, "kubectl is not installed (scripts/provision-k8s.sh installs it)"
    return subprocess.run(
        [binary, f"--kubeconfig={cluster.cp.kubeconfig}", *args],
        input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def rendered(cluster: Cluster, directory: Path) -> tuple[str, list[dict[str, Any]]]:
    result = kubectl(cluster, "kustomize", str(directory))
    assert result.returncode == 0, result.stderr
    return result.stdout, [d for d in yaml.safe_load_all(result.stdout) if d]


def test_deploy_renders_and_the_api_server_accepts_it(cluster: Cluster) -> None:
    text, objects = rendered(cluster, DEPLOY)
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment",
                     "MutatingWebhookConfiguration", "Namespace", "NetworkPolicy",
                     "PodDisruptionBudget", "Role",
                     "RoleBinding", "Service", "ServiceAccount",
                     "ValidatingWebhookConfiguration"]  # fmt: skip
    # Namespaced objects need their namespace to exist for a server-side dry run.
    cluster.core.create_namespace({"metadata": {"name": "muster-system"}})
    # The PodDisruptionBudget ships as policy/v1 (1.21+); 1.20 serves the same fields as
    # policy/v1beta1 only.
    (pdb,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert pdb["apiVersion"] == "policy/v1"
    pdb["apiVersion"] = "policy/v1beta1"
    text = yaml.safe_dump_all(objects)
    result = kubectl(cluster, "apply", "--dry-run=server", "-f", "-", stdin=text)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(objects), result.stdout
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout
    # The generated scheduler ConfigMap holds the shipped configuration, byte for byte.
    (config_map,) = [o for o in objects
                     if o["metadata"]["name"].startswith("muster-scheduler-config")]  # fmt: skip
    shipped = (REPO_ROOT / "scheduler-config" / "muster-scheduler.yaml").read_text()
    assert config_map["data"]["muster-scheduler.yaml"] == shipped


def test_cert_manager_addon_renders(cluster: Cluster) -> None:
    # Only rendered: kube-apiserver knows cert-manager's kinds only once cert-manager's CRDs
    # are installed, which this control plane does not have.
    _, objects = rendered(cluster, DEPLOY / "cert-manager")
    assert {(o["apiVersion"], o["kind"]) for o in objects} == {
        ("cert-manager.io/v1", "Issuer"),
        ("cert-manager.io/v1", "Certificate"),
    }


def test_probe_node_add_on_renders_and_the_api_server_accepts_it(cluster: Cluster) -> None:
    text, objects = rendered(cluster, DEPLOY / "probe-node")
    assert sorted(o["kind"] for o in objects) == [
        "ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"]  # fmt: skip
    try:
        cluster.core.create_namespace({"metadata": {"name": "muster-system"}})
    except ApiException as exc:
        assert exc.status == 409  # made by the deploy/ test
    result = kubectl(cluster, "apply", "--dry-run=server", "-f", "-", stdin=text)
    assert result.returncode == 0, result.stderr
    assert all(line.endswith("(server dry run)") for line in result.stdout.splitlines())

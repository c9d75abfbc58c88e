"""deploy/ agrees with the code and with itself: the pieces that must match are checked here.

Rendering with kustomize and server-side dry-run against a real kube-apiserver happen in
``tests/e2e/test_webhook_e2e.py``; these checks read the manifests directly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.core.admission.workloads import KINDS
from app.core.model.admissionrules import ADMISSION_KINDS
from app.core.model.groupobjects import GROUP_KINDS
from app.core.model.queues import parse_queue_config
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
NAMESPACE = "muster-system"


def documents(path: Path) -> Iterator[dict[str, Any]]:
    yield from (d for d in yaml.safe_load_all(path.read_text()) if d)


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object listed in deploy/kustomization.yaml, by (kind, name)."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for doc in documents(DEPLOY / name):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in found, f"{key} defined twice"
            found[key] = doc
    return found


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def test_every_resource_file_is_listed_and_namespaced_explicitly(objects: dict) -> None:
    listed = set(yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding",
                      "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}  # fmt: skip
    for (kind, name), obj in objects.items():
        if kind not in cluster_scoped:
            assert obj["metadata"].get("namespace") in (NAMESPACE, "kube-system"), (kind, name)


def test_scheduler_config_copy_is_identical() -> None:
    copy = DEPLOY / "scheduler" / "muster-scheduler.yaml"
    original = ROOT / "scheduler-config" / "muster-scheduler.yaml"
    assert copy.read_bytes() == original.read_bytes(), (
        "deploy/scheduler/muster-scheduler.yaml differs from scheduler-config/: "
        "cp scheduler-config/muster-scheduler.yaml deploy/scheduler/"
    )


def test_scheduler_reaches_the_muster_service(objects: dict) -> None:
    config = yaml.safe_load((DEPLOY / "scheduler" / "muster-scheduler.yaml").read_text())
    (extender,) = config["extenders"]
    match = re.fullmatch(r"https://([^.]+)\.([^.]+)\.svc:(\d+)/", extender["urlPrefix"])
    assert match, extender["urlPrefix"]
    service = objects[("Service", match.group(1))]
    assert service["metadata"]["namespace"] == match.group(2)
    ports = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
    assert ports[int(match.group(3))] == "https-extender"
    assert [p["name"] for p in service["spec"]["ports"]] == ["https-extender", "https-webhook",
                                                             "http-ops"]  # fmt: skip
    muster = container(objects[("Deployment", "muster")])
    named = {p["name"]: p["containerPort"] for p in muster["ports"]}
    assert named == {"https-extender": 8888, "https-webhook": Settings().webhook_port,
                     "http-ops": 9090}  # fmt: skip
    assert f"--port={named['https-extender']}" in muster["args"]
    assert f"--webhook-port={named['https-webhook']}" in muster["args"]
    assert f"--ops-listen=0.0.0.0:{named['http-ops']}" in muster["args"]
    # Leader election: the Lease the Role allows is the one the configuration names.
    election = config["leaderElection"]
    role = objects[("Role", "muster-scheduler-leader-election")]
    assert role["metadata"]["namespace"] == election["resourceNamespace"]
    assert any(election["resourceName"] in r.get("resourceNames", []) for r in role["rules"])


def test_scheduler_deployment_mounts_its_config(objects: dict) -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    deployment = objects[("Deployment", "muster-scheduler")]
    spec = deployment["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == generator["name"]
    mount = next(m for m in container(deployment)["volumeMounts"] if m["name"] == volume["name"])
    file_name = Path(generator["files"][0]).name
    assert f"--config={mount['mountPath']}/{file_name}" in container(deployment)["command"]
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["serviceAccountName"] == "muster-scheduler"
    roles = {o["roleRef"]["name"] for (k, _), o in objects.items() if k == "ClusterRoleBinding"
             and o["subjects"][0]["name"] == "muster-scheduler"}  # fmt: skip
    assert roles == {"system:kube-scheduler", "system:volume-scheduler"}


def test_muster_rbac_covers_what_the_code_does(objects: dict) -> None:
    rules = objects[("ClusterRole", "muster")]["rules"]

    def allowed(group: str, resource: str) -> set[str]:
        return {v for r in rules if group in r["apiGroups"] and resource in r["resources"]
                for v in r["verbs"]}  # fmt: skip

    assert {"list", "watch"} <= allowed("", "nodes")
    assert {"list", "watch", "patch"} <= allowed("", "pods")
    assert allowed("", "pods/binding") == {"create"}
    assert allowed("", "pods/eviction") == {"create"}
    assert "get" in allowed("", "namespaces")
    assert "create" in allowed("", "events")
    for kind in KINDS:  # every workload the webhook may read
        assert "get" in allowed(kind.group, kind.plural), kind.resource
    for group_kind in GROUP_KINDS:  # every gang object the cache may watch
        assert {"list", "watch"} <= allowed(group_kind.group, group_kind.plural)
    assert "get" in allowed("scheduling.k8s.io", "priorityclasses")
    for admission_kind in ADMISSION_KINDS:  # what may see Bindings (dry runs or not)
        assert {"list", "watch"} <= allowed(admission_kind.group, admission_kind.plural)
    granted = {(g, res) for r in rules for g in r["apiGroups"] for res in r["resources"]}
    core = {"nodes", "pods", "pods/binding", "pods/eviction", "namespaces", "events"}
    expected = (
        {("", r) for r in core}
        | {(k.group, k.plural) for k in KINDS}
        | {(k.group, k.plural) for k in GROUP_KINDS}
        | {("scheduling.k8s.io", "priorityclasses")}
        | {(k.group, k.plural) for k in ADMISSION_KINDS}
    )
    assert granted == expected, "nothing beyond what Muster uses"
    assert all("*" not in r["verbs"] for r in rules)


@pytest.mark.parametrize(("kind", "path"), [
    ("MutatingWebhookConfiguration", "/mutate"),
    ("ValidatingWebhookConfiguration", "/validate"),
])  # fmt: skip
def test_webhook_configuration(objects: dict, kind: str, path: str) -> None:
    (webhook,) = objects[(kind, "muster")]["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] == 2
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""],
                                 "apiVersions": ["v1"], "resources": ["pods"],
                                 "scope": "Namespaced"}]  # fmt: skip
    if kind.startswith("Mutating"):
        assert webhook["reinvocationPolicy"] == "IfNeeded"
    service = webhook["clientConfig"]["service"]
    assert (service["name"], service["namespace"], service["path"], service["port"]) == (
        "muster",
        NAMESPACE,
        path,
        Settings().webhook_port,
    )
    excluded = {e["key"]: e for e in webhook["namespaceSelector"]["matchExpressions"]}
    by_name = excluded["kubernetes.io/metadata.name"]
    assert by_name["operator"] == "NotIn"
    assert set(by_name["values"]) == {"kube-system", Settings().muster_namespace}
    assert excluded["muster.io/managed"] == {"key": "muster.io/managed", "operator": "NotIn",
                                             "values": ["false"]}  # fmt: skip
    # cert-manager injects from the Certificate deploy/cert-manager/ defines.
    certificates = {d["metadata"]["name"]: d for d in documents(DEPLOY / "cert-manager" /
                    "certificates.yaml") if d["kind"] == "Certificate"}  # fmt: skip
    source = objects[(kind, "muster")]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    namespace, name = source.split("/")
    assert certificates[name]["metadata"]["namespace"] == namespace


def test_tls_secret_paths_and_certificate_agree(objects: dict) -> None:
    deployment = objects[("Deployment", "muster")]
    spec = deployment["spec"]["template"]["spec"]
    (projected,) = [v for v in spec["volumes"] if "projected" in v]
    mount = next(m for m in container(deployment)["volumeMounts"] if m["name"] == projected["name"])
    paths: dict[str, str] = {}
    secret_name = ""
    for source in projected["projected"]["sources"]:
        ((kind, ref),) = source.items()
        secret_name = ref["name"] if kind == "secret" else secret_name
        for item in ref["items"]:
            paths[item["key"]] = f"{mount['mountPath']}/{item['path']}"
    args = container(deployment)["args"]
    assert f"--tls-cert={paths['tls.crt']}" in args
    assert f"--tls-key={paths['tls.key']}" in args
    assert f"--client-ca={paths['ca.crt']}" in args
    assert f"--queues={paths['queues.yaml']}" in args
    assert paths["queues.yaml"] == "/etc/muster/queues.yaml"
    certificate = next(d for d in documents(DEPLOY / "cert-manager" / "certificates.yaml")
                       if d["metadata"]["name"] == "muster-webhook")  # fmt: skip
    assert certificate["spec"]["secretName"] == secret_name
    assert "muster.muster-system.svc" in certificate["spec"]["dnsNames"]


def test_muster_deployment_is_locked_down_and_probed(objects: dict) -> None:
    deployment = objects[("Deployment", "muster")]
    pod = deployment["spec"]["template"]["spec"]
    c = container(deployment)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert (c["readinessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["path"]) == (
        "/readyz",
        "/healthz",
    )
    # kubelet has no client certificate: probes go to the ops listener.
    assert {c["readinessProbe"]["httpGet"]["port"], c["livenessProbe"]["httpGet"]["port"]} == {
        "http-ops"
    }
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert "--in-cluster" in c["args"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # The Dockerfile's user is the one the pod runs as.
    dockerfile = (ROOT / "Dockerfile").read_text()
    uid = pod["securityContext"]["runAsUser"]
    assert f"USER {uid}:{uid}" in dockerfile
    assert re.search(r"^EXPOSE 8888 8443 9090$", dockerfile, re.M)


def test_example_queue_file_is_valid(objects: dict) -> None:
    config = parse_queue_config(objects[("ConfigMap", "muster-queues")]["data"]["queues.yaml"])
    assert config.default_queue in config.queues


def test_probe_node_add_on_runs_the_real_command_with_least_privilege() -> None:
    addon = DEPLOY / "probe-node"
    kustomization = yaml.safe_load((addon / "kustomization.yaml").read_text())
    found = {(d["kind"], d["metadata"]["name"]): d
             for name in kustomization["resources"] for d in documents(addon / name)}  # fmt: skip
    daemonset = found[("DaemonSet", "muster-probe-node")]
    assert daemonset["metadata"]["namespace"] == NAMESPACE
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "muster-probe-node"
    (probe,) = spec["containers"]
    script = probe["args"][0]
    assert 'muster probe-node --node "$NODE_NAME"' in script
    # The flags the script uses exist on the command (an unknown flag would exit 2 forever).
    from app.cli import build_parser

    build_parser().parse_args(["probe-node", "--node", "n1"])
    env = {e["name"]: e for e in probe["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert "nvidia.com/gpu" not in str(probe.get("resources"))  # takes no GPU
    (rule,) = found[("ClusterRole", "muster-probe-node")]["rules"]
    assert rule == {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}
    binding = found[("ClusterRoleBinding", "muster-probe-node")]
    assert binding["subjects"][0]["namespace"] == NAMESPACE


def test_two_replicas_elect_a_leader_and_a_disruption_budget_keeps_one(objects: dict) -> None:
    deployment = objects[("Deployment", "muster")]
    c = container(deployment)
    assert deployment["spec"]["replicas"] == 2
    assert "--leader-elect" in c["args"]
    # The new pod starts before an old one stops: never fewer than two while rolling.
    rolling = deployment["spec"]["strategy"]
    assert rolling["type"] == "RollingUpdate"
    assert rolling["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env["POD_NAME"] == "metadata.name"  # the identity on the Lease (app/cli.py)
    assert env["POD_IP"] == "status.podIP"  # where followers forward the verbs
    spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = spread["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    pdb = objects[("PodDisruptionBudget", "muster")]
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()


def test_the_lease_role_allows_exactly_the_lease_muster_elects_on(objects: dict) -> None:
    rules = objects[("Role", "muster-leases")]["rules"]
    binding = objects[("RoleBinding", "muster-leases")]
    assert binding["subjects"][0]["name"] == "muster"
    named = [r for r in rules if r.get("resourceNames")]
    assert [r["resourceNames"] for r in named] == [[Settings().lease_name]]
    assert set(named[0]["verbs"]) == {"get", "update"}  # app/k8s/lease.py reads and replaces
    (create,) = [r for r in rules if not r.get("resourceNames")]
    assert create["verbs"] == ["create"]  # the first replica creates it
    assert all(r["apiGroups"] == ["coordination.k8s.io"] for r in rules)


def test_scheduler_calls_the_extender_with_its_client_certificate(objects: dict) -> None:
    """Mutual TLS by default: the scheduler's tlsConfig files are its mounted client Secret,
    the one cert-manager issues (client auth, from the CA Muster trusts)."""
    config = yaml.safe_load((DEPLOY / "scheduler" / "muster-scheduler.yaml").read_text())
    (extender,) = config["extenders"]
    assert extender["enableHTTPS"] is True
    tls = extender["tlsConfig"]
    assert not tls.get("insecure")
    deployment = objects[("Deployment", "muster-scheduler")]
    spec = deployment["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in container(deployment)["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    (volume,) = secrets
    for field, key in (("certFile", "tls.crt"), ("keyFile", "tls.key"), ("caFile", "ca.crt")):
        assert tls[field] == f"{mounts[volume]}/{key}", field
    certificates = {d["metadata"]["name"]: d for d in documents(DEPLOY / "cert-manager" /
                    "certificates.yaml") if d["kind"] == "Certificate"}  # fmt: skip
    client = next(c for c in certificates.values() if c["spec"]["secretName"] == secrets[volume])
    assert "client auth" in client["spec"]["usages"]
    assert "server auth" not in client["spec"]["usages"]
    serving = certificates["muster-webhook"]
    assert client["spec"]["issuerRef"] == serving["spec"]["issuerRef"]  # the CA Muster trusts
    # The profile for an existing kube-scheduler speaks mutual TLS too.
    profile = yaml.safe_load((ROOT / "scheduler-config" / "muster-profile.yaml").read_text())
    (other,) = profile["extenders"]
    assert other["urlPrefix"].startswith("https://") and other["enableHTTPS"] is True
    assert set(other["tlsConfig"]) == {"certFile", "keyFile", "caFile"}


def test_network_policy_admits_only_the_callers_of_each_port(objects: dict) -> None:
    policy = objects[("NetworkPolicy", "muster")]
    muster = objects[("Deployment", "muster")]
    pod_labels = muster["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    port_names = {p["name"] for p in container(muster)["ports"]}
    rules: dict[str, list[dict[str, Any]]] = {}
    for rule in policy["spec"]["ingress"]:
        (port,) = rule["ports"]
        assert port["port"] in port_names, port
        rules[port["port"]] = rule.get("from", [])
    assert set(rules) == port_names, "every port has exactly one rule"
    # The extender: only the muster-scheduler pods (its own namespace).
    scheduler = objects[("Deployment", "muster-scheduler")]["spec"]["template"]["metadata"]
    ((peer,),) = [rules["https-extender"]]
    assert set(peer) == {"podSelector"}
    assert peer["podSelector"]["matchLabels"].items() <= scheduler["labels"].items()
    # The webhook: the API server, which no selector can name (see the file's comment).
    assert rules["https-webhook"] == []
    # Ops: Prometheus pods in namespace monitoring only.
    ((ops,),) = [rules["http-ops"]]
    assert ops["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
    }
    assert ops["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}

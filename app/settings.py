"""Runtime settings of one Muster server (built by the CLI, or directly by tests)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.core.state.bindadmission import DryRunMode
from app.core.state.domains import DEFAULT_KEYS

DEMO_CLUSTER = Path(__file__).parent / "data" / "demo-cluster.yaml"


@dataclass(frozen=True, slots=True)
class Settings:
    """How a server gets its cluster and how it schedules.

    ``mode`` is ``"standalone"`` (nodes from ``cluster_file``; binds kept in memory) or
    ``"cluster"`` (list+watch of a real API server reached through ``kubeconfig`` or the
    in-cluster service account).
    """

    mode: str = "standalone"
    cluster_file: Path | None = None
    kubeconfig: str | None = None
    in_cluster: bool = False
    strategy: str = "muster"
    assume_ttl_seconds: float = 30.0
    demo: bool = False
    #: How long a gang member's bind waits for the rest of its gang; keep it below the
    #: extender httpTimeout kube-scheduler uses (5 s in scheduler-config/).
    bind_barrier_seconds: float = 4.0
    #: How often the planner loop checks the cache for changes (a cycle runs when it changed).
    planner_poll_seconds: float = 0.05
    #: How long a gang's plan holds its reservation before the gang must have started.
    plan_ttl_seconds: float = 60.0
    #: Seconds between discovery rounds for gang objects (Volcano / coscheduling PodGroup CRDs,
    #: Kubernetes' PodGroup/Workload API): a CRD installed later is watched within this time.
    group_discovery_seconds: float = 30.0
    #: Queue configuration file (reloaded when it changes); ``None``: one open queue.
    queue_file: Path | None = None
    #: Also list unresolvable nodes in FailedNodes, for kube-scheduler 1.20 and older, which
    #: ignore FailedAndUnresolvableNodes and would drop those reasons from pod events.
    mirror_unresolvable: bool = False
    #: Filter answers a pod on its own with Muster's best node alone when kube-scheduler's
    #: scoring would weigh nothing else, so kube-scheduler skips scoring and prioritize
    #: (``app.core.policies.solepick``).
    sole_pick: bool = True
    #: Gangs running for less than this are never preempted or reclaimed, unless their pods,
    #: PriorityClass or queue say otherwise (``app.core.policies.minruntime``); 0: none.
    min_runtime_seconds: float = 0.0
    #: Whether the planner may evict lower-priority gangs and reclaim borrowed capacity.
    preemption: bool = True
    #: Expected runtime of running pods that declare none (``muster.io/expected-runtime``),
    #: used to predict when reserved nodes free up.
    default_runtime_seconds: float = 3600.0
    #: Order of gangs within a queue (``app.core.policies.gangorder``): ``longest-first`` or
    #: ``fifo``; and how much queue position a declared runtime may buy (``longest-first``).
    gang_order: str = "longest-first"
    longest_first_window_seconds: float = 600.0
    #: The admission webhook sets this ``spec.schedulerName`` (the profile in scheduler-config/).
    scheduler_name: str = "muster"
    #: Muster's own namespace: the webhook never touches pods there (nor in kube-system).
    muster_namespace: str = "muster-system"
    #: Serving certificate and key of the HTTPS listener (the webhook); both or neither.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: Port of the HTTPS listener, opened only when ``tls_cert``/``tls_key`` are set.
    webhook_port: int = 8443
    #: CA of the client certificates the extender listener requires (kube-scheduler's
    #: ``tlsConfig``); set, the extender speaks HTTPS with ``tls_cert`` and checks clients.
    client_ca: Path | None = None
    #: ``HOST:PORT`` of a separate plain-HTTP listener for health, metrics, debug, explain and
    #: what-if (``app.api.listeners``); ``None``: every listener serves them.
    ops_listen: str | None = None
    #: Node label keys of the network topology levels, broadest first (``app.core.state.domains``).
    topology_keys: tuple[str, ...] = DEFAULT_KEYS
    #: Seconds between samples of queue shares (``/debug/queues/history``, the dashboard chart).
    share_interval_seconds: float = 5.0
    #: Samples of queue shares kept (the oldest are dropped): one hour at the default interval.
    share_history: int = 720
    #: Cluster mode: run for leadership on a Lease (several replicas, one decides); without
    #: it this replica always decides.
    leader_elect: bool = False
    #: The Lease (in ``muster_namespace``) and this replica's identity on it (its pod name).
    lease_name: str = "muster-leader"
    identity: str = ""
    #: How long a Lease lasts without renewal; a leader that cannot renew within the renew
    #: deadline stops deciding; every replica tries (or renews) once per retry period.
    lease_duration_seconds: float = 3.0
    renew_deadline_seconds: float = 2.0
    retry_period_seconds: float = 0.5
    #: The URL other replicas reach this one's extender verbs at (published on the Lease
    #: while it leads; followers forward the verbs there).
    advertise_url: str = ""
    #: Whether the webhook creates gang members behind Muster's scheduling gate: ``auto`` (where
    #: the API server serves gates, 1.27+), ``on`` or ``off``.
    scheduling_gates: str = "auto"
    #: Whether a gang's Bindings go to the API server as dry runs before any is made: ``auto``
    #: (while an admission webhook or policy may see Bindings, or that is not known) or
    #: ``always``.
    bind_dry_run: DryRunMode = "auto"

    def describe(self) -> str:
        """One line saying where the cluster comes from."""
        if self.mode == "cluster":
            source = "in-cluster service account" if self.in_cluster else "kubeconfig"
            return f"cluster mode ({source}{': ' + self.kubeconfig if self.kubeconfig else ''})"
        if self.demo:
            return f"standalone mode on the built-in demo cluster ({DEMO_CLUSTER.name})"
        return f"standalone mode on cluster file {self.cluster_file}"

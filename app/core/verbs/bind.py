"""The bind verb: reserve in the cache, create the Binding, undo the reservation on failure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.core.cycle.planner import Planner
from app.core.gpu.ask import GpuAsk
from app.core.model.errors import BindRejected, GatewayError
from app.core.model.gang import gang_spec
from app.core.model.labels import GPU_IDS, PLAN_RECORD
from app.core.model.values import Pod
from app.core.policies.gpuplacement import GpuPlacement
from app.core.state.cache import ClusterCache
from app.core.state.gateway import Gateway

#: Picks a pod's GPU devices on a node (its plan's, or the live placement policy's), or None
#: for the cache's default choice.
DeviceChooser = Callable[[Pod, str], "tuple[int, ...] | None"]
#: The plan record a pod's Binding carries (``app.core.cycle.records``), or None.
PlanRecorder = Callable[[Pod], "str | None"]


#: How long ``Binder.hold`` counts a pod against its node if no bind comes.
HOLD_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """``error`` is empty on success; otherwise it is the text kube-scheduler receives."""

    error: str = ""
    reason: str = "Bound"


class Binder:
    """Binds pods through a ``Gateway``, never letting concurrent binds over-commit a node."""

    def __init__(
        self,
        cache: ClusterCache,
        gateway: Gateway,
        devices: DeviceChooser | None = None,
        records: PlanRecorder | None = None,
    ) -> None:
        self._cache = cache
        self._gateway = gateway
        self._devices = devices
        self._records = records
        self._held: set[str] = set()

    def _choose(self, uid: str, node: str) -> tuple[int, ...] | None:
        """The GPU devices the placement policy wants for the pod on ``node`` (None: the
        cache's default choice)."""
        if self._devices is None:
            return None
        pod = self._cache.pod(uid)
        return None if pod is None or not GpuAsk.of(pod).count else self._devices(pod, node)

    def hold(self, uid: str, node: str) -> bool:
        """Count a pod scheduled on its own against ``node`` (kube-scheduler's choice-to-be)
        from now until its bind, or for ``HOLD_SECONDS``; whether there was room.

        kube-scheduler places the next pod before the bind of the last one reaches Muster,
        and it does not count GPUs itself (``ignoredByScheduler``): without the hold, Muster
        would offer the same free GPU to several pods in a row, and all but one bind would
        fail and wait in kube-scheduler's backoff.
        """
        try:
            self._cache.assume(uid, node, self._choose(uid, node), ttl=HOLD_SECONDS)
        except BindRejected:
            return False
        self._held.add(uid)
        return True

    def drop_hold(self, uid: str) -> None:
        """Forget the pod's hold (kube-scheduler is placing it again)."""
        if uid in self._held:
            self._held.discard(uid)
            self._cache.forget(uid)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Assume the pod on ``node``, then create its Binding; any failure is an error text."""
        self._held.discard(uid)
        try:
            pod = self._cache.assume(uid, node, self._choose(uid, node))
        except BindRejected as exc:
            return BindOutcome(error=str(exc), reason="Rejected")
        held = self._cache.devices_of(uid)
        wanted = {GPU_IDS: ",".join(map(str, held))} if held else {}
        # A gang member's Binding carries its plan: a gang killed half-way through its binds
        # still tells the next leader where the rest goes.
        record = self._records(pod) if self._records is not None else None
        if record:
            wanted[PLAN_RECORD] = record
        extra = {k: v for k, v in wanted.items() if pod.annotations.get(k) != v} or None
        try:
            self._gateway.bind(namespace, name, uid, node, extra)
        except GatewayError as exc:
            self._cache.forget(uid)
            return BindOutcome(
                error=f"binding {namespace}/{name} to {node} failed: {exc}", reason=exc.reason
            )
        return BindOutcome()

    def check(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Whether the API would accept this bind now (a dry run; nothing changes)."""
        try:
            self._gateway.check_bind(namespace, name, uid, node)
        except GatewayError as exc:
            return BindOutcome(
                error=f"binding {namespace}/{name} to {node} would fail: {exc}", reason=exc.reason
            )
        return BindOutcome()


def device_chooser(
    planner: Planner, gpu: GpuPlacement | None, cache: ClusterCache
) -> DeviceChooser:
    """The binder's device choice: a gang member's planned devices (chosen once, when its
    gang was planned); otherwise the devices ``gpu`` wants on the node in the live view, or
    the cache's default choice without a GPU policy."""

    def choose(pod: Pod, node: str) -> tuple[int, ...] | None:
        spec = gang_spec(pod)
        planned = None if spec is None else planner.planned_devices(pod.uid, spec.key)
        if planned is not None or gpu is None:
            return planned
        return gpu.devices(cache.view(), pod, node)

    return choose


def plan_recorder(planner: Planner) -> PlanRecorder:
    """The record of a gang member's plan, for its Binding (None for other pods)."""

    def record(pod: Pod) -> str | None:
        spec = gang_spec(pod)
        return None if spec is None else planner.record_of(pod.uid, spec.key)

    return record

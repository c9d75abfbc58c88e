"""The cluster cache: nodes, pods and what each node has left, shared by every request.

One re-entrant lock (``app.core.state.waitedlock``) guards all state; public methods take it,
``_private`` helpers assume it is held. Readers take a ``NodeView`` (or a full ``Snapshot``,
``app.core.state.view``): immutable, built at most once per generation, and cheap because node
tables are copy-on-write numpy arrays.

Binds are *assumed* first (the pod's requests count against the node at once, so concurrent
binds cannot over-commit it), *confirmed* when the pod is seen bound (the watch, or the
in-memory gateway in standalone mode), and *forgotten* on bind failure or after a TTL.
"""

from __future__ import annotations

import gc
import operator
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields, replace
from itertools import repeat
from operator import attrgetter, itemgetter
from types import MappingProxyType
from typing import NamedTuple, cast

import numpy as np

from app.core.gpu.ask import MILLI, GpuAsk, usable
from app.core.gpu.ledger import DeviceLedger, Held, device_shortfall
from app.core.model.errors import BindRejected
from app.core.model.gang import explicit_queue, gang_spec
from app.core.model.groupobjects import group_refs
from app.core.model.labels import OWN_NOTES
from app.core.model.podfacts import derive_ahead
from app.core.model.status import SUCCESS, Status
from app.core.model.values import RESOURCE_NAMES, GroupObject, GroupRef, Node, Pod, Resources
from app.core.state.changelog import ChangeLog
from app.core.state.domains import DEFAULT_TREES
from app.core.state.nodetable import NodeTable
from app.core.state.recent import RecentKeys
from app.core.state.statement import Applied, Hold, Release, Reserve, Statement
from app.core.state.view import NodeView, Snapshot, shortfall, vector
from app.core.state.waitedlock import WaitedLock

_R = len(RESOURCE_NAMES)
#: Uids of pods the API deleted that the cache remembers (``ClusterCache.learn_pod``), at most.
GONE_KEPT = 65_536
#: ``ClusterCache.apply`` gives up the lock after about this long (seconds), between operations.
APPLY_SLICE = 0.002
#: At most this many plan reservations are checked and made together (``_reserve_together``).
TOGETHER = 64
#: How many a cache tries together first; it then doubles or halves the number so that one
#: such step takes between a quarter of ``APPLY_SLICE`` and all of it on the machine it runs
#: on (``_next_run``): the lock is only given up between steps.
TOGETHER_FIRST = 8


class ClusterCache:
    """Thread-safe store of nodes and pods with assume/confirm/forget for binds in flight."""

    def __init__(
        self,
        *,
        assume_ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        ahead: Callable[[Sequence[Pod]], None] = derive_ahead,
        nodes_ahead: Callable[[NodeTable], None] = DEFAULT_TREES,
    ) -> None:
        """``ahead``: what to derive of the pods the cache stores, after storing them and
        outside the lock (``derive_ahead``: the facts every cycle reads); ``nodes_ahead``:
        the same for each new node set the watch brings (``trees_ahead``: its topology tree),
        so that a cycle finds it made."""
        self._lock = WaitedLock()
        self._ahead = ahead
        self._nodes_ahead = nodes_ahead
        self._clock = clock
        self._assume_ttl = assume_ttl
        self._nodes: list[Node] = []
        self._index: dict[str, int] = {}
        self._alloc = np.zeros((0, _R), dtype=np.int64)
        self._special = np.zeros(0, dtype=bool)
        self._table: NodeTable | None = None
        self._used = np.zeros((0, _R), dtype=np.int64)
        self._pods: dict[str, Pod] = {}
        self._placement: dict[str, str] = {}
        self._assumed: dict[str, float] = {}
        self._reserved: dict[str, str] = {}
        self._gang_of: dict[str, str] = {}
        # Group objects by reference, and which pods name which reference.
        self._groups: dict[GroupRef, GroupObject] = {}
        self._pod_refs: dict[str, tuple[GroupRef, ...]] = {}
        self._ref_pods: dict[GroupRef, set[str]] = {}
        self._gang_index: dict[str, set[str]] = {}
        # Usage per queue key (see ``queue_key``), kept as pods move, so quota checks need
        # no pass over every pod.
        self._queue_key: dict[str, QueueKey] = {}
        self._queue_applied: dict[str, QueueKey] = {}
        self._queue_used: dict[QueueKey, np.ndarray] = {}
        self._bound_at: dict[str, float] = {}
        # Uids of pods and names of nodes the API deleted, oldest first (``learn_pod`` and
        # ``learn_nodes`` never bring one back).
        self._gone: RecentKeys[str] = RecentKeys(GONE_KEPT)
        self._gone_nodes: RecentKeys[str] = RecentKeys(GONE_KEPT)
        self._devices = DeviceLedger()
        # Backfill holds: room promised to a head-of-line gang (node -> amount), kept out of
        # everyone's reach except work that ends before ``_hold_until``.
        self._holds: dict[str, np.ndarray] = {}
        self._hold_owner = ""
        self._hold_until = 0.0
        self._backfill_view: NodeView | None = None
        self._wall = time.time
        self._generation = 0
        self._placed_generation = 0
        self._plan_generation = 0
        self._freed_generation = 0
        self._changes = ChangeLog()
        self._together = TOGETHER_FIRST
        self._view: NodeView | None = None
        self._snapshot: Snapshot | None = None
        self._synced = False

    # -- nodes ---------------------------------------------------------------------------

    def upsert_node(self, node: Node) -> bool:
        """Add or replace a node; returns whether anything changed."""
        return self.upsert_nodes([node])

    def upsert_nodes(self, nodes: Iterable[Node]) -> bool:
        """Add or replace several nodes at once (one generation step)."""
        nodes = list(nodes)
        with self._lock:
            if self._gone_nodes:  # the API's word on a name brings a deleted node back
                for node in nodes:
                    self._gone_nodes.discard(node.name)
            changed = self._upsert_nodes(nodes)
        if changed:
            self._derive_nodes()
        return changed

    def learn_nodes(self, nodes: Iterable[Node]) -> bool:
        """``upsert_nodes`` for the nodes of an extender call, but for nodes the API deleted
        (kube-scheduler's snapshot of a call in flight may still hold one): those are not
        brought back, only the API's next word on that name does."""
        with self._lock:
            return self._upsert_nodes([n for n in nodes if n.name not in self._gone_nodes])

    def replace_nodes(self, nodes: Iterable[Node]) -> None:
        """Make the node set exactly ``nodes`` (a relist)."""
        nodes = list(nodes)
        with self._lock:
            wanted = {n.name for n in nodes}
            if self._gone_nodes:  # (a relist's word on a name brings a deleted node back)
                for name in wanted:
                    self._gone_nodes.discard(name)
            for name in [n.name for n in self._nodes if n.name not in wanted]:
                self._delete_node(name)
            self._upsert_nodes(nodes)
        self._derive_nodes()

    def delete_node(self, name: str) -> None:
        """Forget a node; pods still placed on it keep their placement until they go."""
        with self._lock:
            self._delete_node(name)
        self._derive_nodes()

    def _derive_nodes(self) -> None:
        """``nodes_ahead`` of the node set now, outside the lock (``learn_nodes``, on the
        filter path, leaves it to the cycle)."""
        with self._lock:
            table = self._current_table()
        self._nodes_ahead(table)

    def _current_table(self) -> NodeTable:
        if self._table is None:
            self._table = NodeTable(self._nodes, self._index, self._alloc, self._special)
        return self._table

    def _upsert_nodes(self, nodes: list[Node]) -> bool:
        # A name given twice in one batch: the last one stands (as two upserts in a row would).
        latest = list({n.name: n for n in nodes}.values())
        changed = [n for n in latest if self._node_changed(n)]
        if not changed:
            return False
        new_nodes = list(self._nodes)
        new_index = dict(self._index)
        alloc = self._alloc.copy()
        special = self._special.copy()
        appended: list[Node] = []
        rows: list[int] = []
        for node in changed:
            i = new_index.get(node.name)
            if i is None:
                new_index[node.name] = len(new_nodes) + len(appended)
                appended.append(node)
            else:
                new_nodes[i] = node
                alloc[i] = node.allocatable
                special[i] = _is_special(node)
                rows.append(i)
        if appended:
            alloc = np.vstack([alloc, np.array([n.allocatable for n in appended], np.int64)])
            special = np.concatenate([special, [_is_special(n) for n in appended]])
            usage = self._usage_on({n.name for n in appended})
            used_rows = [usage.get(n.name, Resources()) for n in appended]
            self._used = np.vstack([self._used, np.array(used_rows, np.int64).reshape(-1, _R)])
            new_nodes.extend(appended)
        self._nodes, self._index, self._alloc, self._special = new_nodes, new_index, alloc, special
        # A node changed in place keeps its devices' state (most node changes: a cordon, a
        # taint, a label) and a new node only adds rows; re-placing every holding pod costs
        # tens of milliseconds at 5,000 nodes.
        known = len(new_nodes) - len(appended)
        if self._devices.renew_nodes(new_nodes[:known], rows):
            self._devices.add_nodes(appended, self._pods)
        else:
            self._devices.set_nodes(self._nodes, self._pods)
        self._table = None
        self._bump()
        return True

    def _node_changed(self, node: Node) -> bool:
        i = self._index.get(node.name)
        return i is None or self._nodes[i] != node

    def _delete_node(self, name: str) -> None:
        self._gone_nodes.add(name)
        i = self._index.get(name)
        if i is None:
            return
        keep = [j for j in range(len(self._nodes)) if j != i]
        self._nodes = [self._nodes[j] for j in keep]
        self._index = {n.name: j for j, n in enumerate(self._nodes)}
        self._alloc = self._alloc[keep]
        self._special = self._special[keep]
        self._used = self._used[keep]
        self._devices.drop_node(name)
        self._table = None
        self._bump()

    def _usage_on(self, nodes: set[str]) -> dict[str, Resources]:
        """What the pods placed on each of ``nodes`` request together, in one pass over the
        placements (pods listed before their nodes, as at start when the pod LIST ends
        first: a pass per node made adding 2,000 nodes under 16,000 such pods take 1 s)."""
        usage: dict[str, Resources] = {}
        pods = self._pods
        for uid, where in self._placement.items():
            if where in nodes:
                before = usage.get(where)
                requests = pods[uid].requests
                usage[where] = requests if before is None else before + requests
        return usage

    # -- pods ----------------------------------------------------------------------------

    def upsert_pod(self, pod: Pod) -> None:
        """Add or replace a pod as the API (or a call) describes it.

        A pod seen with ``spec.nodeName`` confirms an assumed bind; a finished pod stops
        counting against its node.
        """
        with self._lock:
            stored = self._upsert_pod(pod)
        self._ahead((stored,))

    def upsert_pods(self, pods: Iterable[Pod]) -> None:
        """``upsert_pod`` for many pods under one lock."""
        with self._lock:
            stored = list(map(self._upsert_pod, pods))
        self._ahead(stored)

    def learn_pod(self, pod: Pod) -> Pod | None:
        """Record a pod seen in an extender call unless the cache already knows it better.

        Returns the cached pod: once the watch (or a bind) has told more than the call, keep it.
        Returns ``None`` (and records nothing) for a pod the cache does not know that is not a
        pending pod to learn: one the API deleted, or one already bound. kube-scheduler 1.20
        puts a pod it failed back into its queue as its informer has it then, bound if a bind
        (Muster's, of a parked gang member) landed during the attempt; that copy is never
        taken out of the queue, and the first try after the pod is deleted sends it here.
        Learning it would count a deleted pod on its node for good.
        """
        with self._lock:
            known = self._pods.get(pod.uid)
            if known is not None and (known.node_name or not pod.node_name):
                return known
            if known is None and (pod.node_name or pod.uid in self._gone):
                return None
            self._upsert_pod(pod)
            return self._pods[pod.uid]  # with its group object attached

    def replace_pods(self, pods: Iterable[Pod]) -> None:
        """Make the pod set exactly ``pods`` (a relist); assumed binds in flight survive."""
        pods = list(pods)
        with self._lock:
            wanted = {p.uid for p in pods}
            for uid in [u for u in self._pods if u not in wanted and u not in self._assumed]:
                self._delete_pod(uid)
            stored = list(map(self._upsert_pod, pods))
        self._ahead(stored)

    def delete_pod(self, uid: str) -> None:
        """Forget a pod and give its resources back."""
        with self._lock:
            self._delete_pod(uid)

    def _upsert_pod(self, pod: Pod) -> Pod:
        """Store ``pod``; returns the object stored (with its group attached)."""
        old = self._pods.get(pod.uid)
        counted = self._counted(pod.uid)
        if old is not None and old.node_name and not pod.node_name:
            # The API never clears spec.nodeName: this version is older than the bind the
            # cache already knows of (a LIST read before it, an event it overtook). Dropping
            # the node would free the pod's room while it holds it.
            pod = replace(pod, node_name=old.node_name)
        pod = self._attach_group(pod, old)
        self._pods[pod.uid] = pod
        short = False
        if (
            old is None
            or old.labels is not pod.labels
            or old.annotations is not pod.annotations
            or old.group is not pod.group
        ):
            spec = gang_spec(pod)
            self._unindex_gang(pod.uid)
            if spec is not None:
                self._gang_of[pod.uid] = spec.key
                members = self._gang_index.setdefault(spec.key, set())
                members.add(pod.uid)
                short = spec.min_member is not None and len(members) < spec.min_member
            self._queue_key[pod.uid] = queue_key(pod, spec is not None)
        target = ""
        if not pod.terminal:
            if pod.node_name:
                target = pod.node_name
                self._assumed.pop(pod.uid, None)
                self._reserved.pop(pod.uid, None)
            elif pod.uid in self._assumed or pod.uid in self._reserved:
                target = self._placement.get(pod.uid, "")
        else:
            self._reserved.pop(pod.uid, None)
        where_before = self._placement.get(pod.uid, "")
        held_before = self._devices.held(pod.uid)
        self._move(pod.uid, old.requests if old else None, pod.requests, target)
        # Node usage changed only if the pod moved, its requests changed where it is placed,
        # or it holds other devices now. Otherwise (a pending pod coming or changing, a label
        # or status update of a running pod) keep the node view and filters' memos built on it.
        usage_same = (
            where_before == target
            and (not target or (old is not None and old.requests == pod.requests))
            and self._devices.held(pod.uid) == held_before
        )
        placed = counted or self._counted(pod.uid)
        # Planning learns nothing from a waiting pod's new version that differs in nothing but
        # kube-scheduler's PodScheduled condition (in a burst, kube-scheduler writes it on
        # every pod it rejects) or Muster's own notes (the echo of a plan record or a nudge),
        # nor from a new member of a gang that is still short of members (no cycle plans it
        # until its last one comes; shuffled gangs arrive a member at a time). Each would
        # otherwise start a cycle.
        # Nor from a placed pod's new version that only settles it where it was placed: the
        # echo of its bind, the kubelet's status (phase, start time) while it runs. Its
        # room is counted the same; the loop's forced cycle (once a second) still reads the
        # rest (a start time for backfill estimates, a fulfilled plan to drop).
        if old is None:
            nothing_new = short
        else:
            nothing_new = _BUT_NOTES(pod) == _BUT_NOTES(old) and _same_but_own_notes(
                pod.annotations, old.annotations
            )
        quiet = usage_same and (
            (not placed and nothing_new)
            or (old is not None and bool(target) and not pod.terminal and _settles(old, pod))
        )
        self._bump(nodes=not usage_same, placed=placed, uids=(pod.uid,), quiet=quiet)
        if where_before and not target:
            self._freed_generation = self._generation
        return pod

    def _counted(self, uid: str) -> bool:
        """Whether pod ``uid`` is placed, assumed or reserved (see ``placed_generation``)."""
        return uid in self._placement or uid in self._assumed or uid in self._reserved

    def _unindex_gang(self, uid: str) -> None:
        key = self._gang_of.pop(uid, None)
        if key is not None:
            members = self._gang_index.get(key)
            if members is not None:
                members.discard(uid)
                if not members:
                    del self._gang_index[key]

    # -- group objects (PodGroups, Workload groups) ---------------------------------------------

    def _attach_group(self, pod: Pod, old: Pod | None) -> Pod:
        """``pod`` with the group object it names attached (``Pod.group``), indexed by ref."""
        if old is not None and old.labels is pod.labels and old.annotations is pod.annotations:
            refs = self._pod_refs.get(pod.uid, ())
        else:
            refs = group_refs(
                pod.namespace, pod.labels, pod.annotations, pod.scheduling_group, pod.workload_ref
            )
            if refs != self._pod_refs.get(pod.uid, ()):
                self._unindex_refs(pod.uid)
                if refs:
                    self._pod_refs[pod.uid] = refs
                    for ref in refs:
                        self._ref_pods.setdefault(ref, set()).add(pod.uid)
        group = next((g for g in (self._groups.get(r) for r in refs) if g is not None), None)
        return pod if pod.group is group else replace(pod, group=group)

    def _unindex_refs(self, uid: str) -> None:
        for ref in self._pod_refs.pop(uid, ()):
            uids = self._ref_pods.get(ref)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._ref_pods[ref]

    def upsert_groups(self, groups: Iterable[GroupObject]) -> None:
        """Add or replace group objects; their pods see the new ones at once."""
        with self._lock:
            for group in groups:
                self._groups[group.ref] = group
                self._reattach(group.ref)

    def delete_groups(self, refs: Iterable[GroupRef]) -> None:
        """Forget group objects (their pods keep only what their own keys say)."""
        with self._lock:
            for ref in refs:
                if self._groups.pop(ref, None) is not None:
                    self._reattach(ref)

    def replace_groups(self, sources: Iterable[str], groups: Iterable[GroupObject]) -> None:
        """Make the group objects of ``sources`` exactly ``groups`` (a relist, or the API no
        longer serving a kind: ``groups`` empty)."""
        groups = list(groups)
        wanted = {g.ref for g in groups}
        kinds = set(sources)
        with self._lock:
            gone = [r for r in self._groups if r.source in kinds and r not in wanted]
            self.delete_groups(gone)
            self.upsert_groups(g for g in groups if self._groups.get(g.ref) != g)

    def group(self, ref: GroupRef) -> GroupObject | None:
        """The group object ``ref`` names, if known."""
        with self._lock:
            return self._groups.get(ref)

    def groups(self) -> list[GroupObject]:
        """Every group object known, by source, namespace and name."""
        with self._lock:
            return [self._groups[r] for r in sorted(self._groups)]

    def _reattach(self, ref: GroupRef) -> None:
        for uid in list(self._ref_pods.get(ref, ())):
            pod = self._pods.get(uid)
            if pod is not None:
                self._upsert_pod(pod)

    def gang_size_of(self, key: str) -> int:
        """How many cached pods belong to gang ``key`` (``gang_members_of`` without the list)."""
        with self._lock:
            return len(self._gang_index.get(key, ()))

    def gang_members_of(self, key: str) -> list[Pod]:
        """The cached pods of gang ``key`` (``namespace/name``), from the gang index."""
        with self._lock:
            return [self._pods[uid] for uid in self._gang_index.get(key, ())]

    def _delete_pod(self, uid: str) -> None:
        old = self._pods.pop(uid, None)
        self._gone.add(uid)
        self._unindex_gang(uid)
        self._unindex_refs(uid)
        counted = self._counted(uid)
        self._assumed.pop(uid, None)
        self._reserved.pop(uid, None)
        if old is not None:
            placed_before = uid in self._placement
            self._move(uid, old.requests, old.requests, "")
            self._bump(nodes=placed_before, placed=counted, uids=(uid,))
            if placed_before:
                self._freed_generation = self._generation
        self._queue_key.pop(uid, None)

    def _move(
        self,
        uid: str,
        old_req: Resources | None,
        new_req: Resources,
        target: str,
        devices: tuple[int, ...] | None = None,
    ) -> None:
        """Re-account pod ``uid`` from its current placement to ``target`` (``""``: none);
        ``devices``: the GPU devices Muster chose for it there."""
        current = self._placement.get(uid, "")
        before = self._devices.release(uid)
        if devices is None and before is not None and before.node == target:
            devices = before.devices
        if current and old_req is not None:
            i = self._index.get(current)
            if i is not None:
                self._used[i] -= vector(old_req)
            key = self._queue_applied.pop(uid, None)
            if key is not None:
                self._queue_used[key] -= vector(old_req)
        if target:
            self._placement[uid] = target
            if uid not in self._reserved:
                self._bound_at.setdefault(uid, self._wall())
            i = self._index.get(target)
            if i is not None:
                self._used[i] += vector(new_req)
            pod = self._pods.get(uid)
            if pod is not None:
                self._devices.place(uid, target, pod, devices)
            key = self._queue_key.get(uid)
            if key is not None:
                held = self._queue_used.get(key)
                self._queue_used[key] = (
                    held if held is not None else np.zeros(_R, np.int64)
                ) + vector(new_req)
                self._queue_applied[uid] = key
        else:
            self._placement.pop(uid, None)
            self._bound_at.pop(uid, None)

    # -- binds in flight ------------------------------------------------------------------

    def assume(
        self,
        uid: str,
        node: str,
        devices: tuple[int, ...] | None = None,
        *,
        ttl: float | None = None,
    ) -> Pod:
        """Count pod ``uid`` against ``node`` now, before the API confirms the bind.

        GPU pods also take devices: ``devices`` if given and free, else the default choice
        (a pod reserved or assumed on this node keeps its devices). Assuming a pod assumed
        elsewhere moves it. The assumption lapses after ``ttl`` (default: the cache's
        ``assume_ttl``) unless the watch confirms the bind.
        Raises ``BindRejected`` if the pod or node is unknown or the node no longer has room.
        Checking and reserving happen under one lock, so parallel binds cannot over-commit.
        """
        ttl = self._assume_ttl if ttl is None else ttl
        with self._lock:
            pod = self._pods.get(uid)
            if pod is None:
                raise BindRejected(f"pod {uid} is unknown to Muster (no filter call seen)")
            i = self._index.get(node)
            if i is None:
                raise BindRejected(f"node {node} is unknown to Muster")
            if pod.node_name:
                if pod.node_name == node:
                    return pod
                raise BindRejected(f"pod {pod.key} is already bound to {pod.node_name}")
            if self._placement.get(uid) == node:
                fresh = uid not in self._assumed
                self._assumed[uid] = self._clock() + ttl
                if fresh:  # its plan's room: usage stays, but it now holds the node
                    self._bump(nodes=False)
                return pod
            self._move(uid, pod.requests, pod.requests, "")
            free = self._alloc[i] - self._used[i]
            need = np.asarray(pod.requests, dtype=np.int64)
            if (need > free).any():
                self._bump()
                raise BindRejected(
                    f"node {node} no longer fits {pod.key}: {shortfall(pod.requests, free)}"
                )
            ask = GpuAsk.of(pod)
            if ask.count:
                room = self._devices.free_row(node)
                if devices is None or not usable(room, ask, devices):
                    devices = self._devices.choose(node, pod)
                if devices is None:
                    self._bump()
                    raise BindRejected(
                        f"node {node} no longer fits {pod.key}: {device_shortfall(ask, room)}"
                    )
            self._move(uid, pod.requests, pod.requests, node, devices)
            self._assumed[uid] = self._clock() + ttl
            self._bump()
            return pod

    def forget(self, uid: str) -> None:
        """Undo an assumed bind (the bind failed); a confirmed bind is left alone. A pod
        whose plan reserved the node it was assumed on keeps that reservation (the plan still
        holds the room for it; only its bind failed)."""
        with self._lock:
            if self._assumed.pop(uid, None) is None:
                return
            self._unassume(uid)
            self._bump()

    def _unassume(self, uid: str) -> None:
        pod = self._pods.get(uid)
        if pod is None or pod.node_name:
            return
        if self._reserved.get(uid) == self._placement.get(uid):
            return  # back to the plan's reservation, same node and devices
        self._move(uid, pod.requests, pod.requests, "")

    def confirm(self, uid: str, node: str) -> None:
        """Record that pod ``uid`` is bound to ``node`` (what the watch would report)."""
        with self._lock:
            pod = self._pods.get(uid)
            if pod is not None and pod.node_name != node:
                self._upsert_pod(replace(pod, node_name=node))

    def reserve(self, placements: Mapping[str, str], *, force: bool = False) -> Status:
        """Hold room for a plan: count each pod (uid -> node) against its node, all or none.

        Returns ``SUCCESS``, else why nothing was reserved: ``UNRESOLVABLE`` when a pod or node
        is gone, ``UNSCHEDULABLE`` when a node no longer has room. Pods already holding their
        node are left as they are. ``force`` reserves even where room is still taken (by
        victims being evicted for this very plan), so nothing else can take the room they free.
        GPU pods get the default devices; a planning session names them (see ``apply``).
        """
        with self._lock:
            return self._reserve(Reserve("", placements, force=force))

    def apply(self, statement: Statement, *, slice_seconds: float = APPLY_SLICE) -> Applied:
        """Carry out a planning session's statement: releases and holds as recorded, each
        ``Reserve`` all or none with its planned devices, re-checked against whatever changed
        since the session's snapshot.

        Operations are applied in order, each whole under the lock; the lock is given up
        between slices of about ``slice_seconds``, so a large statement never keeps a request
        (filter, bind) waiting longer than that. Whatever another caller changes in between is
        what later operations are checked against, as if the statement had come later.
        """
        refused: dict[int, Status] = {}
        devices: dict[str, tuple[int, ...]] = {}
        ops = statement.ops
        clean, expected, i = True, statement.base, 0
        alone = 0  # operations before this one are applied one at a time
        while True:
            with _collector_held(), self._lock:
                clean = clean and self._generation == expected
                deadline = time.perf_counter() + slice_seconds
                while i < len(ops):
                    if i >= alone:
                        end = _run_end(ops, i, self._together)
                        if end - i > 1:
                            began = time.perf_counter()
                            done = self._reserve_together(ops, i, end)
                            took = time.perf_counter() - began
                            self._together = _next_run(self._together, took, slice_seconds)
                            if done:
                                i = end
                                # No step begun that would, as long as this one, end past
                                # the slice: the lock is held about one slice at most.
                                if time.perf_counter() + took >= deadline:
                                    break
                                continue
                        alone = end  # one by one says which are refused, and why
                    self._apply_op(i, ops[i], refused, devices)
                    i += 1
                    if time.perf_counter() >= deadline:
                        break
                expected = self._generation
                if i >= len(ops):
                    return Applied(refused, devices, clean, expected)
            # Leaving the lock hands it to a waiting request first (``WaitedLock.release``).

    def _reserve_together(
        self,
        ops: Sequence[Reserve | Release | Hold],
        i: int,
        end: int,
    ) -> bool:
        """Make the plain reservations ``ops[i:end]`` (``_run_end``) in one step when they
        all fit together now; returns whether it did (False: nothing done, apply them one
        at a time).

        Only for pods that hold nothing yet, each named once, with planned devices for every
        GPU pod. Usage only grows as they are reserved one after another, so when their sum
        fits each node (and their planned devices are free in turn) each fits in its turn:
        the outcome of applying them one by one, none refused. Otherwise, one by one says
        which are refused and why.
        """
        fast = self._reserve_whole_run(cast(list[Reserve], ops[i:end]))
        if fast is not None:
            return fast
        pods, index, reserved, placement = self._pods, self._index, self._reserved, self._placement
        rows: dict[int, list[Pod]] = {}
        planned: dict[str, tuple[int, ...]] = {}
        # As one by one takes them: per operation, per node in the order nodes first come.
        order: list[tuple[str, list[Pod]]] = []
        named = 0
        for k in range(i, end):
            op = ops[k]
            assert isinstance(op, Reserve)
            if not op.placements:
                return False
            planned.update(op.devices)
            mine: dict[str, list[str]] = {}
            for uid, node in op.placements.items():
                found = mine.get(node)
                if found is None:
                    mine[node] = [uid]
                else:
                    found.append(uid)
            for node, named_here in mine.items():
                row = index.get(node)
                looked = [pods.get(uid) for uid in named_here]
                if row is None or not all(p is not None and not p.node_name for p in looked):
                    return False  # a node or pod gone, or a pod bound
                here = cast(list[Pod], looked)
                order.append((node, here))
                found_pods = rows.get(row)
                if found_pods is None:
                    rows[row] = list(here)
                else:
                    found_pods.extend(here)
            named += len(op.placements)
        uids = {pod.uid for _, members_at in order for pod in members_at}
        if not self._all_new(uids, named, planned):
            return False
        at = np.fromiter(rows, dtype=np.int64, count=len(rows))
        first = next(iter(rows.values()))[0].requests
        if all(p.requests == first for on_row in rows.values() for p in on_row):
            many = np.fromiter(map(len, rows.values()), dtype=np.int64, count=len(rows))
            need = many[:, None] * vector(first)
        else:
            need = np.array([sum((vector(p.requests) for p in on_row), np.zeros(_R, np.int64))
                             for on_row in rows.values()])  # fmt: skip
        if (need > self._alloc[at] - self._used[at]).any():
            return False
        nodes = self._nodes
        checked = self._devices.check_run(
            [(nodes[row].name, on_row) for row, on_row in rows.items()], planned
        )
        if checked is None:
            return False
        self._used[at] += need  # rows are distinct
        self._devices.place_run(checked)
        records = dict(checked.all_records())
        # In the order one by one makes them (dict updates in bulk: thousands of pods).
        flat = [(pod.uid, node) for node, members in order for pod in members]
        reserved.update(flat)
        placement.update(flat)
        held = [(uid, records[uid]) for uid, _ in flat if uid in records]
        # Every record holds the devices planned for its pod (``check_run`` takes those or
        # none): nothing for ``Applied.devices``.
        self._devices.place_checked(None, None, held)
        keys = self._queue_key
        queued = [(pod.uid, keys.get(pod.uid), pod.requests) for _, ms in order for pod in ms]
        self._queue_applied.update((uid, key) for uid, key, _ in queued if key is not None)
        by_queue = Counter((key, requests) for _, key, requests in queued if key is not None)
        for (key, requests), count in by_queue.items():
            before = self._queue_used.get(key)
            amount = vector(requests) * count
            self._queue_used[key] = amount if before is None else before + amount
        self._generation += end - i - 1  # one generation per operation, as one by one
        self._bump()
        return True

    def _all_new(self, uids: set[str], named: int, planned: Mapping[str, object]) -> bool:
        """Whether a run naming ``named`` pods (``uids``) can be reserved in one step: no pod
        named twice, devices planned only for its own pods, and none of them binding,
        reserved, placed or holding devices already (one by one says what then happens)."""
        # (dict views iterate the smaller side: the dicts hold every pod placed)
        return (
            len(uids) == named
            and planned.keys() <= uids
            and self._assumed.keys().isdisjoint(uids)
            and self._reserved.keys().isdisjoint(uids)
            and self._placement.keys().isdisjoint(uids)
            and not self._devices.holds_any(uids)
        )

    def _reserve_whole_run(self, run: Sequence[Reserve]) -> bool | None:
        """``_reserve_together`` for the usual run, read with whole-list steps instead of pod
        by pod: every pod of one requests, each either asking one whole GPU with one planned
        device or asking none with none planned, and each operation's pods lying on its nodes
        one stretch per node (so the order one by one makes the records in is the order the
        pods are named in). ``None``: not such a run (``_reserve_together`` looks at it pod by
        pod); otherwise its answer (False: nothing done, apply them one at a time)."""
        uids: list[str] = []
        names: list[str] = []
        planned: dict[str, tuple[int, ...]] = {}
        for op in run:
            if not op.placements:
                return None
            planned.update(op.devices)
            uids.extend(op.placements)
            names.extend(op.placements.values())
        count = len(uids)
        looked = list(map(self._pods.get, uids))
        if None in looked:
            return False  # a pod gone
        pods = cast(list[Pod], looked)
        if any(map(_NODE_NAME, pods)):
            return False  # a pod bound
        first = pods[0].requests
        if list(map(_REQUESTS, pods)).count(first) != count:
            return None  # pods of other requests: ``_reserve_together`` looks pod by pod
        rows = list(map(self._index.get, names))
        if None in rows:
            return False  # a node gone
        at = np.fromiter(cast(list[int], rows), np.int64, count)
        # One stretch per node in each operation: the stretches' (operation, row) distinct.
        start = np.ones(count, dtype=bool)
        start[1:] = at[1:] != at[:-1]
        edges = np.cumsum([len(op.placements) for op in run])[:-1]
        start[edges] = True
        op_of = np.zeros(count, dtype=np.int64)
        op_of[edges] = 1
        stretch = np.cumsum(op_of)[start] * len(self._nodes) + at[start]
        if len(np.unique(stretch)) != len(stretch):
            return None
        if not self._all_new(set(uids), count, planned):
            return False
        asks = GpuAsk.of_each(pods)
        shapes = list(map(_ASK_SHAPE, asks))
        if shapes.count((0, 0)) == count:
            if planned:
                return False  # devices for pods that ask for none: one by one says
            chosen: list[tuple[int, ...]] = []
        elif shapes.count((1, MILLI)) == count:
            chosen = list(map(planned.get, uids))  # type: ignore[arg-type]
            if None in chosen or list(map(len, chosen)).count(1) != count:
                return None  # no planned device for a GPU pod, or not one device
        else:
            return None
        unique, per_row = np.unique(at, return_counts=True)
        need = per_row[:, None] * vector(first)
        if (need > self._alloc[unique] - self._used[unique]).any():
            return False
        cells = None
        if chosen:
            on = np.fromiter(map(_FIRST, chosen), np.int64, count)
            cells = self._devices.whole_cells(at, on)
            if cells is None:
                return False  # a device that does not exist, taken twice, or not fully free
        self._used[unique] += need
        pairs = list(zip(uids, names, strict=True))
        self._reserved.update(pairs)
        self._placement.update(pairs)
        if cells is not None:
            # ``Held`` records made as ``Held._make`` does, without a Python call per pod.
            records = map(tuple.__new__, repeat(Held), zip(names, asks, chosen, strict=True))
            self._devices.place_whole(cells, zip(uids, records, strict=True))
        found = list(map(self._queue_key.get, uids))
        if None in found:
            known = [(uid, key) for uid, key in zip(uids, found, strict=True) if key is not None]
            self._queue_applied.update(known)
            keys = [key for _, key in known]
        else:
            keys = cast(list[QueueKey], found)
            self._queue_applied.update(zip(uids, keys, strict=True))
        for key, members in Counter(keys).items():
            before = self._queue_used.get(key)
            amount = vector(first) * members
            self._queue_used[key] = amount if before is None else before + amount
        self._generation += len(run) - 1  # one generation per operation, as one by one
        self._bump()
        return True

    def _apply_op(
        self,
        i: int,
        op: Reserve | Release | Hold,
        refused: dict[int, Status],
        devices: dict[str, tuple[int, ...]],
    ) -> None:
        if isinstance(op, Release):
            self.unreserve(op.uids)
        elif isinstance(op, Hold):
            self.set_holds(op.owner, op.holds, op.until)
        else:
            status = self._reserve(op)
            if not status.ok:
                refused[i] = status
                return
            planned = op.devices
            for uid in op.placements:
                held = self._devices.held(uid)
                if held is not None and planned.get(uid) != held.devices:
                    devices[uid] = held.devices

    def _reserve(self, op: Reserve) -> Status:
        placements, force = op.placements, op.force
        # Per node row: its pods to reserve and their summed requests (Python sums: a gang
        # has a handful of pods per node, fewer than numpy calls would cost).
        needed: dict[int, tuple[Resources, list[Pod]]] = {}
        for uid, node in placements.items():
            pod = self._pods.get(uid)
            if pod is None:
                return Status.unresolvable(f"pod {uid} is gone")
            if pod.node_name or uid in self._assumed or self._placement.get(uid) == node:
                continue
            i = self._index.get(node)
            if i is None:
                return Status.unresolvable(f"node {node} is gone")
            found = needed.get(i)
            if found is None:
                needed[i] = (pod.requests, [pod])
            else:
                found[1].append(pod)
                needed[i] = (found[0] + pod.requests, found[1])
        for i, (need, pods) in needed.items():
            if force:
                break
            free = self._alloc[i] - self._used[i]
            node = self._nodes[i].name
            if (vector(need) > free).any():
                why = shortfall(need, free)
                return Status.unschedulable(f"node {node} no longer has room: {why}")
            fit = self._devices.check_all(node, pods, op.devices)
            if not fit.ok:
                return fit.prefixed(f"node {node} no longer has room: ")
        for i, (need, pods) in needed.items():
            self._reserve_on(i, need, pods, op.devices)
        if needed:
            self._bump()
        return SUCCESS

    def _reserve_on(
        self,
        i: int,
        need: Resources,
        pods: list[Pod],
        devices: Mapping[str, tuple[int, ...]],
    ) -> None:
        """Reserve ``pods`` (checked to fit) on node row ``i``; ``need``: their summed
        requests. ``_move`` for each, with the node's and queues' sums added once."""
        node = self._nodes[i].name
        placed: list[Pod] = []  # those accounted here (the others by ``_move``)
        by_queue: dict[QueueKey, list[Pod]] = {}
        for pod in pods:
            uid = pod.uid
            if uid in self._reserved:
                self._unreserve(uid)
            self._reserved[uid] = node
            if uid in self._placement or self._devices.held(uid) is not None:
                self._move(uid, pod.requests, pod.requests, node, devices.get(uid))
                continue
            self._placement[uid] = node
            self._devices.place(uid, node, pod, devices.get(uid))
            placed.append(pod)
            key = self._queue_key.get(uid)
            if key is not None:
                by_queue.setdefault(key, []).append(pod)
                self._queue_applied[uid] = key
        if placed:
            self._used[i] += vector(_summed(placed, pods, need))
        for key, members in by_queue.items():
            held = self._queue_used.get(key)
            amount = vector(_summed(members, pods, need))
            self._queue_used[key] = (held if held is not None else np.zeros(_R, np.int64)) + amount

    def unreserve(self, uids: Iterable[str]) -> None:
        """Release plan reservations (pods already bound or binding keep their node)."""
        with self._lock:
            changed = False
            for uid in uids:
                if uid in self._reserved:
                    self._unreserve(uid)
                    changed = True
            if changed:
                self._bump()

    def _unreserve(self, uid: str) -> None:
        self._reserved.pop(uid, None)
        pod = self._pods.get(uid)
        if pod is not None and not pod.node_name and uid not in self._assumed:
            self._move(uid, pod.requests, pod.requests, "")

    def expire_assumed(self) -> list[str]:
        """Forget assumptions older than the TTL that were never confirmed; returns their uids."""
        with self._lock:
            return self._expire()

    def _expire(self) -> list[str]:
        if not self._assumed:
            return []
        now = self._clock()
        stale = [uid for uid, deadline in self._assumed.items() if deadline <= now]
        for uid in stale:
            del self._assumed[uid]
            self._unassume(uid)
        if stale:
            self._bump()
        return stale

    # -- readers -------------------------------------------------------------------------

    def pod(self, uid: str) -> Pod | None:
        """The cached pod with this uid."""
        with self._lock:
            return self._pods.get(uid)

    def pod_at(self, uid: str, version: str) -> Pod | None:
        """The cached pod with this uid if the cache read it at ``version`` (its
        ``resourceVersion``; ``None`` for an empty one): then any copy of that version says
        what it says, and need not be read again."""
        pod = self._pods.get(uid)  # one dict read: no lock needed
        return pod if version and pod is not None and pod.version == version else None

    def view(self) -> NodeView:
        """The current ``NodeView`` (shared between callers until something changes)."""
        with self._lock:
            self._expire()
            if self._view is None:
                self._backfill_view = NodeView(
                    generation=self._generation,
                    table=self._current_table(),
                    used=self._used.copy(),
                    gpu_free=self._devices.free(),
                )
                self._view = self._backfill_view
                if self._holds:
                    held = self._backfill_view.used.copy()
                    for node, amount in self._holds.items():
                        i = self._index.get(node)
                        if i is not None:
                            held[i] += amount
                    self._view = replace(self._backfill_view, used=held)
            return self._view

    def backfill_view(self) -> NodeView:
        """The node view without backfill holds: for work that ends before they start."""
        with self._lock:
            self.view()
            assert self._backfill_view is not None
            return self._backfill_view

    def set_holds(self, owner: str, holds: Mapping[str, Resources], until: float) -> None:
        """Promise room on nodes to ``owner`` (a head-of-line gang) from ``until`` on; an empty
        ``holds`` lifts them. Every view but ``backfill_view`` counts held room as used."""
        with self._lock:
            new = {n: np.asarray(r, np.int64) for n, r in holds.items()}
            same = (
                owner == self._hold_owner
                and abs(until - self._hold_until) < 1.0
                and new.keys() == self._holds.keys()
                and all((new[n] == self._holds[n]).all() for n in new)
            )
            if same:
                return
            self._holds, self._hold_owner, self._hold_until = new, owner, until
            self._bump()

    @property
    def holds(self) -> tuple[str, dict[str, Resources], float]:
        """``(owner, node -> held amount, until)`` of the backfill holds in force."""
        with self._lock:
            return (
                self._hold_owner,
                {n: Resources(*(int(x) for x in a)) for n, a in self._holds.items()},
                self._hold_until,
            )

    def snapshot(self) -> Snapshot:
        """The current ``Snapshot``: node view, pods, placements."""
        with self._lock:
            view = self.view()
            if self._snapshot is None or self._snapshot.view is not view:
                self._snapshot = Snapshot(
                    view=view,
                    pods=MappingProxyType(dict(self._pods)),
                    placement=MappingProxyType(dict(self._placement)),
                    assumed=frozenset(self._assumed),
                    reserved=MappingProxyType(dict(self._reserved)),
                    gang_members=MappingProxyType(dict(self._gang_of)),
                    bound_at=MappingProxyType(dict(self._bound_at)),
                    devices=MappingProxyType(self._devices.holders()),
                    generation=self._generation,
                    placed_generation=self._placed_generation,
                    changes=self._changes,
                )
            return self._snapshot

    def base(self) -> Base:
        """The snapshot, the view without holds and the holds, taken together (a planning
        session starts from them)."""
        with self._lock:
            snapshot = self.snapshot()
            return Base(snapshot, self.backfill_view(), self.holds)

    def devices_of(self, uid: str) -> tuple[int, ...]:
        """The GPU devices pod ``uid`` holds (empty if none)."""
        with self._lock:
            held = self._devices.held(uid)
            return held.devices if held is not None else ()

    def queue_usage(self, released: Iterable[str] = ()) -> dict[QueueKey, np.ndarray]:
        """Resources held (bound, binding or reserved) per queue key; as if the plan
        reservations of ``released`` uids were dropped (a session's pending releases)."""
        with self._lock:
            used = {k: v.copy() for k, v in self._queue_used.items()}
            for uid in released:
                key = self._queue_applied.get(uid)
                pod = self._pods.get(uid)
                if key is None or pod is None or uid not in self._reserved:
                    continue
                if not pod.node_name and uid not in self._assumed:
                    used[key] -= np.asarray(pod.requests, np.int64)
            return {k: v for k, v in used.items() if v.any()}

    @property
    def gang_member_count(self) -> int:
        """How many cached pods belong to a gang (the planner idles when there are none)."""
        return len(self._gang_of)

    @property
    def generation(self) -> int:
        """Increases on every change."""
        return self._generation

    @property
    def synced(self) -> bool:
        """Whether the cache holds a complete picture (initial list done, or file loaded)."""
        return self._synced

    def mark_synced(self, synced: bool = True) -> None:
        """Set by the source that fills the cache once its initial load is complete."""
        self._synced = synced

    @property
    def plan_generation(self) -> int:
        """The generation of the last change a plan may depend on: every change but a pod's
        new version that differs only in its ``PodScheduled`` condition (``Pod.unschedulable``,
        read by the nudges, never by planning). A planner cycle is due only when it moved."""
        return self._plan_generation

    @property
    def freed_generation(self) -> int:
        """The generation of the last change that gave a node's room back: a pod that held
        a node went, finished, or lost its placement."""
        return self._freed_generation

    @property
    def placed_generation(self) -> int:
        """Increases on every change but those of pods that neither hold nor had a node
        (bound, binding or planned): a pending pod coming, changing or going leaves it."""
        return self._placed_generation

    def _bump(
        self,
        *,
        nodes: bool = True,
        placed: bool = True,
        uids: tuple[str, ...] | None = None,
        quiet: bool = False,
    ) -> None:
        """Something changed: a new generation; ``nodes``: node usage or nodes changed too;
        ``placed``: a pod that holds or held a node (or a plan's room) changed (implied by
        ``nodes``); ``uids``: the only pods whose facts changed (``ChangeLog``; None: not
        said, so any may have); ``quiet``: nothing a plan depends on changed (see
        ``plan_generation``)."""
        self._generation += 1
        if not quiet:
            self._plan_generation = self._generation
        self._changes.record(self._generation, uids)
        if nodes or placed:
            self._placed_generation = self._generation
        if nodes:
            self._view = None
        self._snapshot = None


def _settles(old: Pod, new: Pod) -> bool:
    """Whether ``new`` differs from ``old`` in nothing but its node (bound now), phase, start
    time, ``PodScheduled`` condition and Muster's own notes."""
    return _BUT_SETTLING(new) == _BUT_SETTLING(old) and _same_but_own_notes(
        new.annotations, old.annotations
    )


def _fields_but(*skipped: str) -> Callable[[Pod], tuple[object, ...]]:
    """A pod's compared fields but ``skipped``, as one tuple: two pods whose tuples are equal
    differ in nothing but those (what ``==`` compares, less them; no pod is built for it)."""
    names = [f.name for f in fields(Pod) if f.compare and f.name not in skipped]
    return operator.attrgetter(*names)


#: What ``_upsert_pod`` compares to find a waiting pod's new version brings nothing new.
_BUT_NOTES = _fields_but("unschedulable", "annotations")
#: What ``_settles`` compares.
_BUT_SETTLING = _fields_but("node_name", "phase", "started", "unschedulable", "annotations")


def _same_but_own_notes(new: Mapping[str, str], old: Mapping[str, str]) -> bool:
    """Whether two annotation maps differ in nothing but ``OWN_NOTES``."""
    if new is old or new == old:
        return True
    return all(new.get(k) == old.get(k) for k in new.keys() | old.keys() if k not in OWN_NOTES)


_NODE_NAME = attrgetter("node_name")
_REQUESTS = attrgetter("requests")
_ASK_SHAPE = attrgetter("count", "milli")
_FIRST = itemgetter(0)


def _run_end(ops: Sequence[Reserve | Release | Hold], i: int, most: int) -> int:
    """Where the run of plain (not forced) ``Reserve`` operations from ``i`` ends, after at
    most ``most`` of them."""
    end = i
    while end < len(ops) and end - i < most:
        op = ops[end]
        if not isinstance(op, Reserve) or op.force:
            break
        end += 1
    return max(end, i + 1)


@contextmanager
def _collector_held() -> Iterator[None]:
    """No garbage collection inside the block (it runs at the next allocation after it).

    A collection that falls inside a commit step held the cache's lock 4 ms where the step
    took under 2 ms, and filter calls waited for it; the collector is process-wide, so this
    defers it in every thread for that long. Restores the collector's state as found."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _next_run(together: int, took: float, slice_seconds: float) -> int:
    """How many reservations to try together next, after ``together`` took ``took`` seconds:
    halved when that was over ``slice_seconds``, doubled (up to ``TOGETHER``) when it was
    under a quarter of it."""
    if took > slice_seconds:
        return max(2, together // 2)
    if took < slice_seconds / 4:
        return min(TOGETHER, together * 2)
    return together


class Base(NamedTuple):
    """See ``ClusterCache.base``."""

    snapshot: Snapshot
    backfill: NodeView
    holds: tuple[str, dict[str, Resources], float]


class QueueKey(NamedTuple):
    """What decides a pod's queue, whatever the queue configuration says."""

    explicit: str
    namespace: str
    scheduler_name: str
    gang: bool


def queue_key(pod: Pod, in_gang: bool) -> QueueKey:
    """The pod's ``QueueKey`` (resolved to a queue by ``app.core.state.queueusage``)."""
    found = explicit_queue(pod)
    return QueueKey(found[1] if found else "", pod.namespace, pod.scheduler_name, in_gang)


def _summed(some: list[Pod], every: list[Pod], total: Resources) -> Resources:
    """The summed requests of ``some`` of ``every`` pod, whose sum is ``total``."""
    if len(some) == len(every):
        return total
    found = Resources()
    for pod in some:
        found = found + pod.requests
    return found


def _is_special(node: Node) -> bool:
    return node.unschedulable or any(t.effect in ("NoSchedule", "NoExecute") for t in node.taints)

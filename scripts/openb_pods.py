"""The openb trace's pods as kube-scheduler sends them, and the simulator's picks for them,
for the scripts that replay the trace (``replay_openb``, ``bench_extender``, ``bench_insight``).

How a trace row becomes a Pod: cpu request ``<cpu_milli>m``, memory ``<memory_mib>Mi``;
whole GPUs (``gpu_milli == 1000`` or ``num_gpu > 1``) as ``nvidia.com/gpu`` request and
limit; a share of one GPU as the ``muster.io/gpu-fraction`` annotation (``"0.46"``) with the
``muster.io/gpu-share: 1`` marker request and limit; ``gpu_spec`` "A|B" as required node
affinity ``nvidia.com/gpu.product In [A, B]`` (GPU pods only). Each arrival gets a unique
name and uid (the inflated order repeats trace rows).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.core.gpu.ask import MILLI
from app.core.gpu.table import GpuTable
from app.core.model.labels import GPU_FRACTION, GPU_SHARE_RESOURCE
from app.core.model.values import GPU, GPU_PRODUCT_LABEL, Node
from app.core.policies.fgd import default_policy
from app.core.policies.gpushare import choose
from app.sim.openb import Trace

#: The namespace of every replayed pod.
NAMESPACE = "openb"


def fraction_text(milli: int) -> str:
    """A share of one GPU as the annotation's decimal (460 -> "0.46"); exact or it raises."""
    text = f"{milli / MILLI:g}"
    if round(float(text) * MILLI) != milli:
        raise ValueError(f"{milli} milli-GPU does not round-trip through {text!r}")
    return text


def pod_json(trace: Trace, i: int, name: str, uid: str) -> dict[str, Any]:
    """Trace row ``i`` as a pending Pod's API JSON (see the module docstring)."""
    num_gpu, milli = int(trace.num_gpu[i]), int(trace.gpu_milli[i])
    requests: dict[str, str] = {"cpu": f"{int(trace.cpu[i])}m", "memory": f"{trace.memory[i]}Mi"}
    limits: dict[str, str] = {}
    annotations: dict[str, str] = {}
    spec: dict[str, Any] = {"schedulerName": "muster"}
    if num_gpu == 1 and milli < MILLI:
        annotations[GPU_FRACTION] = fraction_text(milli)
        requests[GPU_SHARE_RESOURCE] = limits[GPU_SHARE_RESOURCE] = "1"
    elif num_gpu >= 1:
        requests[GPU] = limits[GPU] = str(num_gpu)
    models = sorted(m.strip() for m in trace.gpu_spec[i].split("|") if m.strip())
    if num_gpu >= 1 and models:
        expression = {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": models}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expression]}]
                }
            }
        }
    resources: dict[str, Any] = {"requests": requests}
    if limits:
        resources["limits"] = limits
    spec["containers"] = [{"name": "main", "image": "openb", "resources": resources}]
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "uid": uid,
        "labels": {"openb/pod": trace.names[i]},
    }
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}


def arrival_identity(k: int, trace: Trace, i: int) -> tuple[str, str]:
    """Unique (name, uid) of arrival number ``k`` (trace row ``i``)."""
    return f"a{k:05d}-{trace.names[i]}", f"00000000-0000-4000-8000-{k:012d}"


@dataclass
class SimResult:
    """The simulator loop's picks (node name or None, devices) per arrival, its final table
    and pods per row."""

    nodes: list[str | None]
    devices: list[tuple[int, ...]]
    table: GpuTable
    pods: np.ndarray
    seconds: float


def simulate_file_order(nodes: Sequence[Node], trace: Trace, arrivals: Sequence[int]) -> SimResult:
    """``app.sim.openb.simulate``'s loop on ``nodes`` in the given (file) order."""
    started = time.perf_counter()
    table = GpuTable.from_nodes(nodes)
    policy = default_policy()
    picks: list[str | None] = []
    devices: list[tuple[int, ...]] = []
    pods = np.zeros(len(table), dtype=np.int64)
    for i in arrivals:
        ask = trace.ask(i)
        policy.observe(ask)
        pick = choose(policy, table, ask)
        if pick is None:
            picks.append(None)
            devices.append(())
            continue
        devices.append(table.apply(pick.row, ask, pick.devices))
        picks.append(table.names[pick.row])
        pods[pick.row] += 1
    return SimResult(picks, devices, table, pods, time.perf_counter() - started)

"""Mixed-workload presets: queues and fair share, backfill, preemption (GPU clusters).

Each preset is a cluster, a mix of job classes (queue, priority, gang size, resources,
runtime, arrival) and, for ``queues``, a queue tree in the YAML schema of ``--queues FILE``
(``app/core/model/queues.py``). ``--scale`` multiplies the nodes, the jobs and the preset's queue
amounts (guarantees and limits), so shares stay the same at any scale.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypedDict

from app.core.model.queues import UNLIMITED, QueueConfig, parse_queue_config
from app.core.model.values import Resources
from app.sim.workload import Arrival, ClusterSpec, JobClass, MixSpec, WorkloadSpec


@dataclass(frozen=True, slots=True)
class Scenario:
    """A preset made of several job classes."""

    cluster: ClusterSpec
    mix: MixSpec
    queues_yaml: str = ""
    backfill: str = "on"  # on | off | both: run with declared runtimes, without, or both
    sample_interval: float = 10.0
    about: str = ""

    @property
    def queues(self) -> QueueConfig | None:
        """The preset's queue tree, if it has one."""
        return parse_queue_config(self.queues_yaml) if self.queues_yaml else None


def scale_queues(config: QueueConfig, factor: float) -> QueueConfig:
    """``config`` with every guarantee, limit and lending limit multiplied by ``factor``."""

    def times(r: Resources) -> Resources:
        return Resources(*(x if x >= UNLIMITED else round(x * factor) for x in r))

    queues = {
        name: replace(q, guaranteed=times(q.guaranteed), limit=times(q.limit),
                      lending_limit=times(q.lending_limit))
        for name, q in config.queues.items()
    }  # fmt: skip
    return replace(config, queues=queues)


_GPU_CLUSTER = ClusterSpec(nodes=16, cpu=64.0, gpus=8, memory_gib=512.0)


class _Common(TypedDict):
    """``WorkloadSpec`` fields every class of these scenarios shares."""

    deadline: float
    namespace: str


_NO_DEADLINE: _Common = {"deadline": 0.0, "namespace": "sim"}

#: Three queues (weights 2:1:1, guarantees in the same proportion) on 128 GPUs, each with far
#: more work than its share, submitted over the first 10 minutes: deserved 64/32/32 GPUs. Jobs
#: are small against the shares (4 or 2 GPUs), so a share can be met closely.
QUEUES_YAML = """\
defaultQueue: research
queues:
  - {name: research, weight: 2, guaranteed: {nvidia.com/gpu: 32}}
  - {name: prod, weight: 1, guaranteed: {nvidia.com/gpu: 16}}
  - {name: batch, weight: 1, guaranteed: {nvidia.com/gpu: 16}}
"""
QUEUES = Scenario(
    cluster=_GPU_CLUSTER,
    mix=MixSpec(
        jobs=300,
        classes=(
            JobClass(WorkloadSpec(queue="research", pods_per_job=2, pod_gpus=2, pod_cpu=8,
                                  runtime=1200, arrival=Arrival("uniform", 600), prefix="res",
                                  **_NO_DEADLINE), 0.4),
            JobClass(WorkloadSpec(queue="prod", pods_per_job=1, pod_gpus=2, pod_cpu=8,
                                  runtime=1200, arrival=Arrival("uniform", 600), prefix="prod",
                                  **_NO_DEADLINE), 0.3),
            JobClass(WorkloadSpec(queue="batch", pods_per_job=1, pod_gpus=2, pod_cpu=4,
                                  runtime=900, arrival=Arrival("uniform", 600), prefix="batch",
                                  **_NO_DEADLINE), 0.3),
        ),
    ),
    queues_yaml=QUEUES_YAML,
    about="3 queues (weights 2:1:1, guarantees 32/16/16 GPUs), all saturated",
)  # fmt: skip

#: A whole-cluster gang (8 x 8 GPUs) submitted at 5 min behind long 4-GPU jobs that fill the
#: cluster, and a stream of short 1-GPU jobs that can fill the holes the draining nodes leave
#: while they are held for the gang; every job declares its longest runtime.
BACKFILL = Scenario(
    cluster=ClusterSpec(nodes=8, cpu=64.0, gpus=8, memory_gib=512.0),
    mix=MixSpec(
        jobs=441,
        classes=(
            JobClass(WorkloadSpec(pods_per_job=1, pod_gpus=4, pod_cpu=4, runtime=900,
                                  jitter=0.5, arrival=Arrival("poisson", 0.2),
                                  declare_runtime=True, prefix="small", **_NO_DEADLINE), 40),
            JobClass(WorkloadSpec(pods_per_job=1, pod_gpus=1, pod_cpu=2, runtime=60,
                                  jitter=0.5, arrival=Arrival("poisson", 0.25),
                                  declare_runtime=True, prefix="short", **_NO_DEADLINE), 400),
            JobClass(WorkloadSpec(pods_per_job=8, pod_gpus=8, pod_cpu=8, runtime=1200,
                                  jitter=0.0, offset=300.0, declare_runtime=True,
                                  prefix="big", **_NO_DEADLINE), 1),
        ),
    ),
    backfill="both",
    about="a whole-cluster gang behind long 4-GPU jobs and a stream of short 1-GPU jobs; "
          "with and without backfill",
)  # fmt: skip

#: 12 low-priority 16-GPU gangs fill 64 GPUs at 0; 4 high-priority 32-GPU gangs arrive
#: between 10 and 50 minutes. Muster's --min-runtime is 0 here (see --min-runtime).
PREEMPTION = Scenario(
    cluster=ClusterSpec(nodes=8, cpu=64.0, gpus=8, memory_gib=512.0),
    mix=MixSpec(
        jobs=16,
        classes=(
            JobClass(WorkloadSpec(pods_per_job=2, pod_gpus=8, pod_cpu=8, runtime=1800,
                                  jitter=0.2, prefix="low", **_NO_DEADLINE), 12),
            JobClass(WorkloadSpec(pods_per_job=4, pod_gpus=8, pod_cpu=8, runtime=900,
                                  jitter=0.2, priority=1000, offset=600.0,
                                  arrival=Arrival("uniform", 2400), prefix="high",
                                  **_NO_DEADLINE), 4),
        ),
    ),
    about="low-priority gangs fill the cluster; high-priority gangs arrive and preempt",
)  # fmt: skip

SCENARIOS: dict[str, Scenario] = {
    "queues": QUEUES,
    "backfill": BACKFILL,
    "preemption": PREEMPTION,
}

"""The workloads ``POST /whatif`` accepts, as typed models: validated here, at the HTTP edge,
and published in the OpenAPI document from the same models, so the two cannot disagree.

Each kind lists the fields ``app.core.admission.workloads`` reads to size it and find its pod
templates; every other field is accepted and ignored (``extra="allow"``). Counts are bounded so
that no accepted workload runs more than ``MAX_PODS`` pods or none at all (a RayCluster always
runs its head).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from app.api.schemas import POD_TEMPLATE
from app.api.wire import integral
from app.core.admission.workloads import JOB, JOBSET, LEADERWORKERSET, PYTORCHJOB, RAYCLUSTER
from app.core.admission.workloads import WorkloadKind as _Kind

PodTemplate = Annotated[dict[str, Any], WithJsonSchema(POD_TEMPLATE)]
# Bounded counts (the bounds go inside the type: outside a union's member they are lost).
_N0_99 = Annotated[int, Field(ge=0, le=99), BeforeValidator(integral)]
_N1_10 = Annotated[int, Field(ge=1, le=10), BeforeValidator(integral)]
_N1_100 = Annotated[int, Field(ge=1, le=100), BeforeValidator(integral)]
_N1_1000 = Annotated[int, Field(ge=1, le=1000), BeforeValidator(integral)]
_N1_10000 = Annotated[int, Field(ge=1, le=10_000), BeforeValidator(integral)]
ObjectName = Annotated[str, Field(min_length=1, max_length=253)]


class _Open(BaseModel):
    """Strict types for the fields listed; any other field accepted and passed on."""

    model_config = ConfigDict(extra="allow", strict=True)


def _api_version(kind: _Kind) -> Any:
    """``apiVersion``: the kind's group and any version (``batch/v1``)."""
    return Field(pattern=f"^{re.escape(kind.group)}/[^/]*$", examples=[kind.api_version])


class Metadata(_Open):
    """The workload's name (the gang's name) and namespace."""

    name: ObjectName
    namespace: ObjectName | None = None


class _Workload(_Open):
    """Every kind: ``apiVersion``, ``kind`` (the tag), ``metadata``, and its ``spec``."""

    metadata: Metadata


class Template(_Open):
    """A pod template holder (``template``)."""

    template: PodTemplate | None = None


class JobSpec(Template):
    """``parallelism`` pods at a time, at most ``completions``."""

    parallelism: _N1_10000 | None = None
    completions: _N1_10000 | None = None


class Job(_Workload):
    """batch Job."""

    apiVersion: str = _api_version(JOB)
    kind: Literal["Job"]
    spec: JobSpec


class ReplicatedJobSpec(Template):
    """A replicated job's Job spec (at most 100 pods at a time)."""

    parallelism: _N1_100 | None = None
    completions: _N1_100 | None = None


class ReplicatedJobTemplate(_Open):
    """A replicated job's Job template."""

    spec: ReplicatedJobSpec


class ReplicatedJob(_Open):
    """``replicas`` copies of a Job."""

    name: Annotated[str, Field(min_length=1, max_length=63)]
    replicas: _N1_10 | None = None
    template: ReplicatedJobTemplate


class JobSetSpec(_Open):
    """Its replicated jobs (all started together, or in order with ``startupPolicy``)."""

    replicatedJobs: list[ReplicatedJob] = Field(min_length=1, max_length=10)


class JobSet(_Workload):
    """jobset.x-k8s.io JobSet (at most 10 x 10 x 100 pods)."""

    apiVersion: str = _api_version(JOBSET)
    kind: Literal["JobSet"]
    spec: JobSetSpec


class ReplicaSpec(Template):
    """One PyTorchJob role."""

    replicas: _N1_1000 | None = None


class PyTorchJobSpec(_Open):
    """Roles (Master, Worker, ...), at most 10."""

    pytorchReplicaSpecs: dict[str, ReplicaSpec] = Field(min_length=1, max_length=10)


class PyTorchJob(_Workload):
    """kubeflow.org PyTorchJob."""

    apiVersion: str = _api_version(PYTORCHJOB)
    kind: Literal["PyTorchJob"]
    spec: PyTorchJobSpec


class WorkerGroup(Template):
    """``minReplicas`` (else ``replicas``) workers of ``numOfHosts`` pods each."""

    groupName: str | None = None
    replicas: _N0_99 | None = None
    minReplicas: _N0_99 | None = None
    numOfHosts: _N1_10 | None = None


class RayClusterSpec(_Open):
    """The head and up to 10 worker groups."""

    headGroupSpec: Template | None = None
    workerGroupSpecs: list[WorkerGroup] | None = Field(None, max_length=10)


class RayCluster(_Workload):
    """ray.io RayCluster."""

    apiVersion: str = _api_version(RAYCLUSTER)
    kind: Literal["RayCluster"]
    spec: RayClusterSpec


class LeaderWorkerTemplate(_Open):
    """One group: a leader and ``size - 1`` workers."""

    size: _N1_10000 | None = None
    workerTemplate: PodTemplate | None = None
    leaderTemplate: PodTemplate | None = None


class LeaderWorkerSetSpec(_Open):
    """What-if sizes one group."""

    leaderWorkerTemplate: LeaderWorkerTemplate


class LeaderWorkerSet(_Workload):
    """leaderworkerset.x-k8s.io LeaderWorkerSet."""

    apiVersion: str = _api_version(LEADERWORKERSET)
    kind: Literal["LeaderWorkerSet"]
    spec: LeaderWorkerSetSpec


Workload = Annotated[
    Job | JobSet | PyTorchJob | RayCluster | LeaderWorkerSet, Field(discriminator="kind")
]

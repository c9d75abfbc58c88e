"""kube-scheduler's extender wire types (k8s.io/kube-scheduler/extender/v1), field for field.

Keys are Go field names with no JSON tags (``Pod``, ``NodeNames``, ``FailedNodes``, ...).
kube-scheduler decodes case-insensitively, so requests are accepted in any key case; answers
always use the exact Go names. Embedded Pod and Node objects stay raw JSON dicts here and are
translated by ``app.core.objects``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import TypedDict


class _Wire(BaseModel):
    """Base: extra keys ignored, keys matched case-insensitively to the Go names."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _any_case(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        names = {name.lower(): name for name in cls.model_fields}
        return {names.get(k.lower(), k) if isinstance(k, str) else k: v for k, v in data.items()}


class NodeList(_Wire):
    """A v1 NodeList as kube-scheduler embeds it (``metadata`` and ``items``)."""

    model_config = ConfigDict(extra="ignore")
    metadata: dict[str, Any] = Field(default_factory=dict)
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_Wire):
    """filter and prioritize request: the pod and its candidate nodes (names or objects)."""

    Pod: dict[str, Any]
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None

    @model_validator(mode="after")
    def _has_candidates(self) -> ExtenderArgs:
        if self.Nodes is None and self.NodeNames is None:
            raise ValueError("one of NodeNames or Nodes is required")
        return self


class ExtenderFilterResult(_Wire):
    """filter answer. Exactly one of ``Nodes``/``NodeNames`` is set, matching the request."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(_Wire):
    """One entry of the prioritize answer (a bare JSON array of these)."""

    Host: str
    Score: int


class HostPriorityDict(TypedDict):
    """``HostPriority`` as a plain dict, for fast serialisation of long lists."""

    Host: str
    Score: int


class MetaPod(_Wire):
    """A victim named by UID only."""

    UID: str


class MetaVictims(_Wire):
    """Victims on one node, by UID."""

    Pods: list[MetaPod] = Field(default_factory=list)
    NumPDBViolations: int = 0


class Victims(_Wire):
    """Victims on one node, as full pod objects."""

    Pods: list[dict[str, Any]] = Field(default_factory=list)
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(_Wire):
    """preempt request: candidate nodes and the victims kube-scheduler would evict on each."""

    Pod: dict[str, Any]
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class ExtenderPreemptionResult(_Wire):
    """preempt answer: always by UID, whatever the request mode."""

    NodeNameToMetaVictims: dict[str, MetaVictims] = Field(default_factory=dict)


class ExtenderBindingArgs(_Wire):
    """bind request."""

    PodName: str = Field(min_length=1)
    PodNamespace: str = Field(min_length=1)
    PodUID: str = Field(min_length=1)
    Node: str = Field(min_length=1)


class ExtenderBindingResult(_Wire):
    """bind answer: empty ``Error`` on success."""

    Error: str = ""

"""kube-scheduler's extender wire types (k8s.io/kube-scheduler/extender/v1), field for field.

Keys are Go field names with no JSON tags (``Pod``, ``NodeNames``, ``FailedNodes``, ...).
kube-scheduler decodes case-insensitively; Muster accepts the Go names and their lower-case
and lowerCamel spellings (validated in pydantic's Rust core, no Python pass over the body) and
always answers with the exact Go names. Embedded Pod and Node objects stay raw JSON dicts
here and are translated by ``app.core.model.parse``.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator
from typing_extensions import TypedDict


class _Wire(BaseModel):
    """Base: extra keys ignored; Go names also accepted in lower case and lowerCamel case."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


def go(name: str, default: Any = ..., **kwargs: Any) -> Any:
    """A field named ``name`` on the wire, also read as ``name.lower()`` and lowerCamel."""
    choices = AliasChoices(name, name.lower(), name[0].lower() + name[1:])
    if default is ...:
        return Field(validation_alias=choices, **kwargs)
    return Field(default, validation_alias=choices, **kwargs)


class NodeList(_Wire):
    """A v1 NodeList as kube-scheduler embeds it (``metadata`` and ``items``)."""

    model_config = ConfigDict(extra="ignore")
    metadata: dict[str, Any] = Field(default_factory=dict)
    items: list[dict[str, Any]] = Field(default_factory=list)


class ExtenderArgs(_Wire):
    """filter and prioritize request: the pod and its candidate nodes (names or objects)."""

    Pod: dict[str, Any] = go("Pod")
    Nodes: NodeList | None = go("Nodes", None)
    NodeNames: list[str] | None = go("NodeNames", None)

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

    Host: str = go("Host")
    Score: int = go("Score")


class HostPriorityDict(TypedDict):
    """``HostPriority`` as a plain dict, for fast serialisation of long lists (output only, so
    no input aliases)."""

    Host: str
    Score: int


class MetaPod(_Wire):
    """A victim named by UID only."""

    UID: str = go("UID")


class MetaVictims(_Wire):
    """Victims on one node, by UID."""

    Pods: list[MetaPod] = go("Pods", default_factory=list)
    NumPDBViolations: int = go("NumPDBViolations", 0)


class Victims(_Wire):
    """Victims on one node, as full pod objects."""

    Pods: list[dict[str, Any]] = go("Pods", default_factory=list)
    NumPDBViolations: int = go("NumPDBViolations", 0)


class ExtenderPreemptionArgs(_Wire):
    """preempt request: candidate nodes and the victims kube-scheduler would evict on each."""

    Pod: dict[str, Any] = go("Pod")
    NodeNameToVictims: dict[str, Victims] | None = go("NodeNameToVictims", None)
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = go("NodeNameToMetaVictims", None)


class ExtenderPreemptionResult(_Wire):
    """preempt answer: always by UID, whatever the request mode."""

    NodeNameToMetaVictims: dict[str, MetaVictims] = Field(default_factory=dict)


class ExtenderBindingArgs(_Wire):
    """bind request."""

    PodName: str = go("PodName", min_length=1)
    PodNamespace: str = go("PodNamespace", min_length=1)
    PodUID: str = go("PodUID", min_length=1)
    Node: str = go("Node", min_length=1)


class ExtenderBindingResult(_Wire):
    """bind answer: empty ``Error`` on success."""

    Error: str = ""

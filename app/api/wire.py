"""kube-scheduler's extender wire types (k8s.io/kube-scheduler/extender/v1), field for field.

Keys are Go field names with no JSON tags (``Pod``, ``NodeNames``, ``FailedNodes``, ...).
kube-scheduler decodes case-insensitively; Muster accepts the Go names and their lower-case
and lowerCamel spellings (validated in pydantic's Rust core, no Python pass over the body) and
always answers with the exact Go names. Embedded Pod and Node objects stay raw JSON dicts
here and are translated by ``app.core.model.parse``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from typing_extensions import TypedDict

from app.api.errors import one_of
from app.api.schemas import NODE, POD

#: An embedded Pod / Node: raw JSON here, documented with what ``app.core.model.parse`` reads.
PodJson = Annotated[dict[str, Any], WithJsonSchema(POD)]
NodeJson = Annotated[dict[str, Any], WithJsonSchema(NODE)]


def integral(value: Any) -> Any:
    """``5.0`` as ``5``: JSON Schema counts a number with no fraction as an integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: An integer field: a JSON integer (``5`` or ``5.0``), never a string or a boolean. With
#: bounds, write ``Annotated[int, Field(ge=..), BeforeValidator(integral)]`` (bounds first, or
#: the JSON Schema loses them).
Integer = Annotated[int, BeforeValidator(integral)]


def _one_of_present(*names: str) -> dict[str, Any]:
    """JSON Schema: at least one of ``names`` is present and not null."""
    return {
        "anyOf": [
            {"required": [name], "properties": {name: {"not": {"type": "null"}}}} for name in names
        ]
    }


class _Wire(BaseModel):
    """Base: extra keys ignored; Go names also accepted in lower case and lowerCamel case.
    Strict types: ``"5"`` is not an integer, ``1`` is not a string (as the schema says)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)


def go(name: str, default: Any = ..., **kwargs: Any) -> Any:
    """A field named ``name`` on the wire, also read as ``name.lower()`` and lowerCamel."""
    choices = AliasChoices(name, name.lower(), name[0].lower() + name[1:])
    if default is ...:
        return Field(validation_alias=choices, **kwargs)
    return Field(default, validation_alias=choices, **kwargs)


class NodeList(_Wire):
    """A v1 NodeList as kube-scheduler embeds it (``metadata`` and ``items``)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    metadata: dict[str, Any] = Field(default_factory=dict)
    items: list[NodeJson] = Field(default_factory=list)


class ExtenderArgs(_Wire):
    """filter and prioritize request: the pod and its candidate nodes (names or objects)."""

    model_config = ConfigDict(json_schema_extra=_one_of_present("NodeNames", "Nodes"))
    Pod: PodJson = go("Pod")
    Nodes: NodeList | None = go("Nodes", None)
    NodeNames: list[str] | None = go("NodeNames", None)

    @model_validator(mode="after")
    def _has_candidates(self) -> ExtenderArgs:
        if self.Nodes is None and self.NodeNames is None:
            raise one_of("NodeNames", "Nodes")
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
    Score: Integer = go("Score")


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
    NumPDBViolations: Integer = go("NumPDBViolations", 0)


class Victims(_Wire):
    """Victims on one node, as full pod objects."""

    Pods: list[PodJson] = go("Pods", default_factory=list)
    NumPDBViolations: Integer = go("NumPDBViolations", 0)


class ExtenderPreemptionArgs(_Wire):
    """preempt request: candidate nodes and the victims kube-scheduler would evict on each."""

    model_config = ConfigDict(
        json_schema_extra=_one_of_present("NodeNameToVictims", "NodeNameToMetaVictims")
    )
    Pod: PodJson = go("Pod")
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

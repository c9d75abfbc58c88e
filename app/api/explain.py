"""``/explain``: why a pod or gang is pending, in one JSON answer (see
``app.core.insight.explain``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, Field

from app.core.insight.explain import Explanation, explain_gang, explain_pod

router = APIRouter(prefix="/explain", tags=["explain"])

#: A Kubernetes object name or namespace (RFC 1123 subdomain, at most 253 characters).
Name = Annotated[
    str, Path(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
]

Category = Literal[
    "quota", "gang-incomplete", "capacity", "fragmentation", "topology", "reservation",
    "priority", "constraints", "none",
]  # fmt: skip


class FixOut(BaseModel):
    """A change checked on the snapshot: what to do, and what then happens."""

    change: str
    effect: str


class ExplanationOut(BaseModel):
    """Why a pod or gang is where it is, and what would let it start sooner."""

    subject: str = Field(description='"pod NAMESPACE/NAME" or "gang NAMESPACE/NAME"')
    state: Literal["running", "binding", "planned", "waiting", "unknown"]
    category: Category = Field(description="the first blocker; none when nothing blocks it")
    summary: str = Field(description="one sentence a user can act on")
    queue: list[dict[str, Any]] = Field(
        description="its queue, then each ancestor: usage, guaranteed, limit, what it may borrow"
    )
    gang: dict[str, Any] | None = Field(description="members seen, needed and bound")
    nodes: list[dict[str, Any]] = Field(description="node reasons for one member, with counts")
    gpus: dict[str, Any] = Field(
        description="free GPUs against the largest whole block per node and topology domain"
    )
    position: dict[str, Any] | None = Field(description="its place in its queue's order")
    eta_seconds: float | None = Field(
        description="expected start from declared or default runtimes; null if unknown"
    )
    fixes: list[FixOut] = Field(description="cheapest first")


def _answer(explanation: Explanation) -> ExplanationOut:
    return ExplanationOut.model_validate(explanation.as_dict())


@router.get(
    "/{namespace}/gang/{name}",
    summary="Why a gang is pending, and what would let it start sooner",
    response_model=ExplanationOut,
)
def gang(request: Request, namespace: Name, name: Name) -> ExplanationOut:
    """The gang's state, first blocker, summary, queue path, GPUs, position, ETA and fixes."""
    outlook = request.app.state.muster.extender.planner.look()
    return _answer(explain_gang(outlook, namespace, name))


@router.get(
    "/{namespace}/{pod}",
    summary="Why a pod is pending (its gang's story when it is in one)",
    response_model=ExplanationOut,
)
def pod(request: Request, namespace: Name, pod: Name) -> ExplanationOut:
    """As for a gang; a pod on its own is explained as a job of one."""
    outlook = request.app.state.muster.extender.planner.look()
    return _answer(explain_pod(outlook, namespace, pod))

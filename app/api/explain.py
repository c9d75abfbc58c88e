"""``/explain``: why a pod or gang is pending; ``/whatif``: what Muster would do with a job
not yet submitted (see ``app.core.insight``). Both change nothing."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from app.api.errors import invalid, parse_body
from app.api.schemas import body, errors
from app.api.wire import Integer, integral
from app.api.workloads import PodTemplate, Workload
from app.core.insight.explain import Explanation, explain_gang, explain_pod
from app.core.insight.whatif import proposal_from, what_if
from app.core.model.categories import Category, JobState
from app.core.model.errors import InvalidInput

router = APIRouter(prefix="/explain", tags=["explain"])

#: A Kubernetes object name or namespace (RFC 1123 subdomain, at most 253 characters).
Name = Annotated[
    str, Path(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
]


class FixOut(BaseModel):
    """A change checked on the snapshot: what to do, and what then happens."""

    change: str
    effect: str


class ExplanationOut(BaseModel):
    """Why a pod or gang is where it is, and what would let it start sooner."""

    subject: str = Field(description='"pod NAMESPACE/NAME" or "gang NAMESPACE/NAME"')
    state: JobState
    category: Category = Field(description="the first blocker; none when nothing blocks it")
    summary: str = Field(description="one sentence a user can act on")
    queue: list[dict[str, Any]] = Field(
        description="its queue, then each ancestor: usage, guaranteed, limit, what it may borrow"
    )
    gang: dict[str, Any] | None = Field(
        description="members seen, needed and bound; the group object declaring the gang "
        "(source) and where its own keys disagree with it (conflicts), when there are any"
    )
    nodes: list[dict[str, Any]] = Field(description="node reasons for one member, with counts")
    gpus: dict[str, Any] = Field(
        description="free GPUs against the largest whole block per node and topology domain"
    )
    position: dict[str, Any] | None = Field(description="its place in its queue's order")
    eta_seconds: float | None = Field(
        description="expected start from declared or default runtimes; null if unknown"
    )
    fixes: list[FixOut] = Field(description="cheapest first")
    planner: str = Field(description="what the planner last said about the gang, if anything")


def _answer(explanation: Explanation) -> ExplanationOut:
    return ExplanationOut.model_validate(explanation.as_dict())


_NAME_ERRORS = errors(422, e422="a malformed namespace or name; `field` names it")


@router.get(
    "/{namespace}/gang/{name}",
    summary="Why a gang is pending, and what would let it start sooner",
    response_model=ExplanationOut,
    responses=_NAME_ERRORS,
)
def gang(request: Request, namespace: Name, name: Name) -> ExplanationOut:
    """The gang's state, first blocker, summary, queue path, GPUs, position, ETA and fixes."""
    outlook = request.app.state.muster.extender.planner.look()
    return _answer(explain_gang(outlook, namespace, name))


@router.get(
    "/{namespace}/{pod}",
    summary="Why a pod is pending (its gang's story when it is in one)",
    response_model=ExplanationOut,
    responses=_NAME_ERRORS,
)
def pod(request: Request, namespace: Name, pod: Name) -> ExplanationOut:
    """As for a gang; a pod on its own is explained as a job of one."""
    outlook = request.app.state.muster.extender.planner.look()
    return _answer(explain_pod(outlook, namespace, pod))


_LEVEL_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 253}
#: A topology level (label key); may be absent, never null.
Level = Annotated[str | None, Field(min_length=1, max_length=253), WithJsonSchema(_LEVEL_SCHEMA)]


class TopologyAsk(BaseModel):
    """Keep the gang inside one domain of a topology level (``required``) or prefer it:
    exactly one of the two."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"minProperties": 1, "maxProperties": 1}
    )
    required: Level = None
    preferred: Level = None

    @field_validator("required", "preferred", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("expected a topology level (a label key), got null")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> TopologyAsk:
        if len(self.model_fields_set) != 1:
            raise ValueError('expected {"required": LEVEL} or {"preferred": LEVEL}')
        return self


def _exactly_one_of(*names: str) -> dict[str, Any]:
    return {
        "oneOf": [{"required": [name], "properties": {name: {"type": "object"}}} for name in names]
    }


class WhatIfRequest(BaseModel):
    """A pod template (with ``replicas``) or a whole workload (exactly one), and overrides."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra=_exactly_one_of("pod", "workload")
    )
    namespace: str | None = Field(None, min_length=1, max_length=253)
    name: str | None = Field(None, min_length=1, max_length=253)
    pod: PodTemplate | None = None
    replicas: Integer = Field(1, ge=1, le=10_000, description="pods from ``pod``; >1 makes a gang")
    workload: Workload | None = None
    queue: str | None = Field(None, min_length=1, max_length=253)
    priority: Integer | None = None
    topology: TopologyAsk | None = None
    minMember: Annotated[int, Field(ge=1, le=10_000), BeforeValidator(integral)] | None = Field(
        None, description="more than the job's pods: it could never start"
    )


class Victim(BaseModel):
    """Running work that would be evicted whole."""

    unit: str
    pods: list[str]
    gpus: float
    workLostSeconds: float


class Member(BaseModel):
    """Where one member would go."""

    node: str
    gpus: list[int]


class WhatIfOut(BaseModel):
    """What Muster would do with the job if it were submitted now (nothing changes)."""

    subject: str
    fits_now: bool = Field(description="it would be placed without evicting anything")
    min_member: int
    basis: str = Field(description="where min-member came from")
    placement: dict[str, Member] = Field(description="member -> node and GPU devices")
    victims: list[Victim] = Field(description="whole gangs evicted to make room, if any")
    eta_seconds: float | None
    explanation: ExplanationOut | None = Field(description="why it would wait, if it would")


whatif_router = APIRouter(tags=["explain"])


@whatif_router.post(
    "/whatif",
    summary="What Muster would do with a job if it were submitted now (changes nothing)",
    response_model=WhatIfOut,
    openapi_extra=body(WhatIfRequest),
    responses=errors(400, 422),
)
async def whatif(request: Request) -> WhatIfOut:
    """Fits now, placement (member -> node, devices), victims, ETA, and the explanation."""
    parsed = parse_body(WhatIfRequest, await request.body())
    services = request.app.state.muster
    planner = services.extender.planner
    outlook = planner.look()
    try:
        proposal = proposal_from(
            parsed.model_dump(exclude_none=True, exclude_defaults=False),
            scheduler_name=services.settings.scheduler_name,
            now=outlook.now,
        )
    except InvalidInput as exc:
        raise invalid(exc) from None
    return WhatIfOut.model_validate(what_if(outlook, proposal).as_dict())

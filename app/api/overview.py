"""Debug views over time and across gangs, for the dashboard (``/ui``) and for curl:
``/debug/queues/history`` (queue shares, sampled in the server) and ``/debug/gangs/outlook``
(every gang's state, first blocker, summary and ETA)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from app.core.insight.headlines import explain_gangs
from app.core.insight.shares import SAMPLED, ShareHistory
from app.core.model.categories import Category, JobState

router = APIRouter(prefix="/debug", tags=["debug"])


class QueueShareOut(BaseModel):
    """One queue in one sample: fractions (0..1) of the cluster, in ``resources`` order."""

    used: list[float]
    deserved: list[float] = Field(description="its fair share (weighted water-filling)")


class ShareSampleOut(BaseModel):
    """Every queue's shares at ``time`` (seconds since the epoch)."""

    seq: int
    time: float
    queues: dict[str, QueueShareOut]


class ShareHistoryOut(BaseModel):
    """Samples after ``since``, oldest first; ``last`` is the newest sample's number (pass it
    as ``since`` next time)."""

    resources: list[str]
    intervalSeconds: float
    capacity: int = Field(description="samples kept; older ones are dropped")
    last: int
    samples: list[ShareSampleOut]


@router.get(
    "/queues/history",
    summary="Queue shares over time against their fair shares (sampled in the server)",
)
def queue_history(
    request: Request,
    since: Annotated[int, Query(ge=0, description="only samples numbered above this")] = 0,
    limit: Annotated[int | None, Query(ge=1, description="at most this many, newest")] = None,
) -> ShareHistoryOut:
    """Per sample and queue: the fraction of the cluster it uses and the fraction it deserves,
    for each of ``resources``."""
    services = request.app.state.muster
    history = services.shares or ShareHistory()
    samples = history.since(since, limit)
    return ShareHistoryOut(
        resources=list(SAMPLED),
        intervalSeconds=services.settings.share_interval_seconds,
        capacity=history.capacity,
        last=history.last_seq,
        samples=[
            ShareSampleOut(
                seq=s.seq,
                time=round(s.time, 3),
                queues={
                    name: QueueShareOut(used=list(q.used), deserved=list(q.deserved))
                    for name, q in s.queues.items()
                },
            )
            for s in samples
        ],
    )


class GangOutlookOut(BaseModel):
    """One gang: where it stands and, when it waits, why and until when."""

    gang: str = Field(description="NAMESPACE/NAME")
    queue: str
    state: JobState
    category: Category = Field(description="the first blocker; none when nothing blocks it")
    summary: str
    eta_seconds: float | None = Field(description="expected start from now; null if unknown")
    explain: str = Field(description="the path of its full explanation")


class GangsOutlookOut(BaseModel):
    """Every gang Muster knows, by key."""

    count: int
    gangs: list[GangOutlookOut]


@router.get(
    "/gangs/outlook",
    summary="Every gang's state, first blocker, summary and ETA",
)
def gangs_outlook(request: Request) -> GangsOutlookOut:
    """The brief ``/explain`` of every gang (no fixes or node reasons), with its queue and ETA;
    computed at most once per planner cycle."""
    services = request.app.state.muster
    if services.gang_lines is not None:
        lines = services.gang_lines()
    else:
        lines = explain_gangs(services.extender.planner.look())
    rows = []
    for line in lines:
        answer = line.answer
        namespace, _, name = line.key.partition("/")
        eta = answer.eta_seconds
        rows.append(
            GangOutlookOut(
                gang=line.key,
                queue=line.queue,
                state=answer.state,
                category=answer.category,
                summary=answer.summary,
                eta_seconds=None if eta is None else round(eta, 1),
                explain=f"/explain/{namespace}/gang/{name}",
            )
        )
    return GangsOutlookOut(count=len(rows), gangs=rows)

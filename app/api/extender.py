"""The four extender verbs over HTTP: translate wire JSON, delegate to ``core.verbs.extender``."""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
import numpy as np
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_json
from starlette.background import BackgroundTask

from app.api import wire
from app.api.errors import BadRequest, invalid, parse_body
from app.api.metrics import Metrics
from app.api.schemas import body, errors
from app.core.model.errors import InvalidInput
from app.core.model.parse import node_from_dict, pod_from_dict
from app.core.model.values import Node, Pod
from app.core.verbs.filter import FilterResult
from app.core.verbs.prioritize import Ranking
from app.core.verbs.victimcheck import Victims
from app.services import Services

router = APIRouter(tags=["extender"])
_PRIORITIES = TypeAdapter(list[wire.HostPriorityDict])
_JSON = "application/json"


def _services(request: Request) -> Services:
    services: Services = request.app.state.muster
    return services


def _metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


async def _prepare_next(services: Services) -> None:
    """After a filter answer is sent: decide ahead for the next pod like it (on the event
    loop, between kube-scheduler's calls; see ``Extender.prepare_next``)."""
    services.extender.prepare_next()


def _read_pod(data: dict[str, Any]) -> Pod:
    try:
        return pod_from_dict(data, "Pod")
    except InvalidInput as exc:
        raise invalid(exc) from None


class _PodReadings:
    """``pod_from_dict`` of the pods in extender calls, remembering the last reading of each
    pod (by uid) with the object it was read from.

    kube-scheduler sends the whole pod on every call and tries a waiting pod again and again
    unchanged (1.20 retries every waiting pod after each finished job): an object equal to
    the one read last for its uid gets that reading again, which is what reading it would
    give (a dict comparison instead of a parse: 9 against 66 µs for a recorded pod). Anything
    else, a bad object included, is read as sent."""

    #: Pods remembered at most; beyond that, all are forgotten (the next calls read them).
    LIMIT = 2048

    def __init__(self) -> None:
        self._last: dict[str, tuple[dict[str, Any], Pod]] = {}

    def pod(self, data: dict[str, Any]) -> Pod:
        """The pod in ``data`` (a 422 ``BadRequest`` if it is not a valid one)."""
        meta = data.get("metadata")
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if not isinstance(uid, str) or not uid:
            return _read_pod(data)
        hit = self._last.get(uid)
        if hit is not None and hit[0] == data:
            return hit[1]
        pod = _read_pod(data)
        if len(self._last) >= self.LIMIT:
            self._last.clear()
        self._last[uid] = (data, pod)
        return pod


_PODS = _PodReadings()


def _nodes(args: wire.ExtenderArgs) -> list[Node] | None:
    if args.Nodes is None:
        return None
    try:
        return [
            node_from_dict(item, f"Nodes.items[{i}]") for i, item in enumerate(args.Nodes.items)
        ]
    except InvalidInput as exc:
        raise invalid(exc) from None


class _RankingAnswers:
    """The last prioritize answer's JSON, reused while the candidates (the same memoised rows,
    ``NodeTable.rows``) and their scores are the same. One slot, replaced whole."""

    def __init__(self) -> None:
        self._last: tuple[np.ndarray, np.ndarray, bytes] | None = None

    def encode(self, ranking: Ranking) -> bytes:
        last = self._last
        if last is not None and last[0] is ranking.rows and np.array_equal(last[1], ranking.scores):
            return last[2]
        body = _encode_ranking(ranking)
        self._last = (ranking.rows, ranking.scores.copy(), body)
        return body


_RANKINGS = _RankingAnswers()


def _encode_ranking(ranking: Ranking) -> bytes:
    """The bare ``[{"Host", "Score"}]`` array; per-node JSON fragments are cached per node set."""
    if len(ranking.rows) and (ranking.rows >= 0).all():
        fragments = ranking.table.host_fragments
        parts = map(
            "{}{}}}".format,
            map(fragments.__getitem__, ranking.rows.tolist()),
            ranking.scores.tolist(),
        )
        return ("[" + ",".join(parts) + "]").encode()
    return _PRIORITIES.dump_json([{"Host": h, "Score": s} for h, s in ranking.pairs()])


class _FilterAnswers:
    """The wire answer of the last ``FilterResult`` (NodeNames mode): the extender hands the
    same result object to pods of one shape until node usage changes (``FilterMemo``), so
    its JSON is encoded once. One slot, replaced whole (thread-safe)."""

    def __init__(self) -> None:
        self._last: tuple[FilterResult, bool, bytes] | None = None

    def encode(self, result: FilterResult, mirror: bool) -> bytes:
        last = self._last
        if last is not None and last[0] is result and last[1] == mirror:
            return last[2]
        failed = result.failed
        if mirror:
            # kube-scheduler 1.20 and older ignore FailedAndUnresolvableNodes and would drop
            # those reasons from the pod's event; 1.21+ let that map win for a node in both.
            failed = {**failed, **result.unresolvable}
        answer = {
            "Nodes": None,
            "NodeNames": result.feasible,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": result.unresolvable,
            "Error": "",
        }
        body = to_json(answer)
        self._last = (result, mirror, body)
        return body


_ANSWERS = _FilterAnswers()


class _Args(NamedTuple):
    """An ``ExtenderArgs`` as the verbs read it: the candidates by name, or as objects (wire
    and model), and the pod."""

    names: list[str] | None
    wire_nodes: wire.NodeList | None
    pod: Pod
    nodes: list[Node] | None


class _PeekMeta(msgspec.Struct):
    uid: str = ""
    resourceVersion: str = ""  # noqa: N815 (the API's name)


class _PeekPod(msgspec.Struct):
    metadata: _PeekMeta = msgspec.field(default_factory=_PeekMeta)


class _Peek(msgspec.Struct):
    """What a call is about, read without reading the pod: its uid and version, and the
    candidates by name."""

    Pod: _PeekPod  # noqa: N815 (the wire's names)
    NodeNames: list[str] | None = None  # noqa: N815
    Nodes: msgspec.Raw = msgspec.Raw()  # noqa: N815  (left undecoded)


_PEEK = msgspec.json.Decoder(_Peek)


def _known(body: bytes, services: Services) -> _Args | None:
    """The call's arguments without reading its pod, when the cache holds that very version
    of it (kube-scheduler's copy and the watch's are one object version: the pod as read
    from the watch is the pod; about 50 µs of the call here); ``None``: read it all."""
    try:
        peek = _PEEK.decode(body)
    except msgspec.DecodeError:
        return None
    if peek.NodeNames is None or bytes(peek.Nodes) not in (b"", b"null"):
        return None
    meta = peek.Pod.metadata
    pod = services.cache.pod_at(meta.uid, meta.resourceVersion)
    return None if pod is None else _Args(peek.NodeNames, None, pod, None)


async def _extender_args(request: Request, services: Services) -> _Args:
    """The arguments of a filter or prioritize call: its candidates, pod and full nodes."""
    body = await request.body()
    known = _known(body, services)
    if known is not None:
        return known
    args = parse_body(wire.ExtenderArgs, body)
    return _Args(args.NodeNames, args.Nodes, _PODS.pod(args.Pod), _nodes(args))


def _json(model: BaseModel) -> Response:
    return Response(model.model_dump_json(), media_type=_JSON)


@router.post(
    "/filter",
    response_model=wire.ExtenderFilterResult,
    summary="Which candidate nodes may take the pod",
    openapi_extra=body(wire.ExtenderArgs),
    responses=errors(400, 422),
)
async def filter_nodes(request: Request) -> Response:
    """kube-scheduler's filter call: ``ExtenderArgs`` in, ``ExtenderFilterResult`` out."""
    services, metrics = _services(request), _metrics(request)
    with metrics.observe("filter"):
        args = await _extender_args(request, services)
        result = services.extender.filter(args.pod, args.names, args.nodes)
        m = metrics.filter_nodes
        m.labels("feasible").inc(len(result.feasible))
        m.labels("failed").inc(len(result.failed))
        m.labels("unresolvable").inc(len(result.unresolvable))
        if result.passed_over:
            m.labels("passed_over").inc(result.passed_over)
        mirror = services.settings.mirror_unresolvable
        if args.wire_nodes is None:
            return Response(
                _ANSWERS.encode(result, mirror),
                media_type=_JSON,
                background=BackgroundTask(_prepare_next, services),
            )
        failed = {**result.failed, **result.unresolvable} if mirror else result.failed
        keep = set(result.feasible)
        pairs = zip(args.wire_nodes.items, args.nodes or (), strict=True)
        items = [item for item, node in pairs if node.name in keep]
        answer: dict[str, Any] = {
            "Nodes": {"metadata": args.wire_nodes.metadata, "items": items},
            "NodeNames": None,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": result.unresolvable,
            "Error": "",
        }
        return Response(to_json(answer), media_type=_JSON)


@router.post(
    "/prioritize",
    response_model=list[wire.HostPriority],
    summary="Score every candidate node 0-10",
    openapi_extra=body(wire.ExtenderArgs),
    responses=errors(400, 422),
)
async def prioritize_nodes(request: Request) -> Response:
    """kube-scheduler's prioritize call: ``ExtenderArgs`` in, a bare ``[{Host, Score}]`` out."""
    services, metrics = _services(request), _metrics(request)
    with metrics.observe("prioritize"):
        args = await _extender_args(request, services)
        ranking = services.extender.prioritize(args.pod, args.names, args.nodes)
        return Response(_RANKINGS.encode(ranking), media_type=_JSON)


@router.post(
    "/preempt",
    response_model=wire.ExtenderPreemptionResult,
    summary="Keep the preemption candidates on which eviction would make the pod fit",
    openapi_extra=body(wire.ExtenderPreemptionArgs),
    responses=errors(400, 422),
)
async def preempt(request: Request) -> Response:
    """kube-scheduler's preempt call; answers by victim UID in both request modes."""
    services, metrics = _services(request), _metrics(request)
    with metrics.observe("preempt"):
        args = parse_body(wire.ExtenderPreemptionArgs, await request.body())
        pod = _PODS.pod(args.Pod)
        candidates: dict[str, Victims] = {}
        given: dict[str, Pod] = {}
        full_victims: dict[str, Victims] = {}
        # Full victims are read (and so checked) even when the by-UID form wins below.
        for node, full in (args.NodeNameToVictims or {}).items():
            uids = []
            for i, item in enumerate(full.Pods):
                try:
                    victim = pod_from_dict(item, f"NodeNameToVictims.{node}.Pods[{i}]")
                except InvalidInput as exc:
                    raise invalid(exc) from None
                given[victim.uid] = victim
                uids.append(victim.uid)
            full_victims[node] = Victims(tuple(uids), full.NumPDBViolations)
        if args.NodeNameToMetaVictims is not None:
            for node, meta in args.NodeNameToMetaVictims.items():
                candidates[node] = Victims(tuple(p.UID for p in meta.Pods), meta.NumPDBViolations)
        elif args.NodeNameToVictims is not None:
            candidates = full_victims
        else:
            raise BadRequest(
                422,
                "NodeNameToMetaVictims: one of NodeNameToMetaVictims or NodeNameToVictims is "
                "required",
                "NodeNameToMetaVictims",
            )
        kept = services.extender.preempt(pod, candidates, given)
        metrics.preempt_nodes.labels("kept").inc(len(kept))
        metrics.preempt_nodes.labels("vetoed").inc(len(candidates) - len(kept))
        answer = wire.ExtenderPreemptionResult(
            NodeNameToMetaVictims={
                node: wire.MetaVictims(
                    Pods=[wire.MetaPod(UID=u) for u in v.uids],
                    NumPDBViolations=v.num_pdb_violations,
                )
                for node, v in kept.items()
            }
        )
        return _json(answer)


@router.post(
    "/bind",
    response_model=wire.ExtenderBindingResult,
    summary="Bind the pod to the chosen node",
    openapi_extra=body(wire.ExtenderBindingArgs),
    responses=errors(400, 422),
)
async def bind(request: Request) -> Response:
    """kube-scheduler's bind call: creates the Binding; failures come back as ``Error``."""
    services, metrics = _services(request), _metrics(request)
    with metrics.observe("bind"):
        args = parse_body(wire.ExtenderBindingArgs, await request.body())
        outcome = await services.extender.bind(
            args.PodNamespace, args.PodName, args.PodUID, args.Node
        )
        metrics.bound(outcome.reason, outcome.error)
        return _json(wire.ExtenderBindingResult(Error=outcome.error))

"""The admission webhooks over HTTP: ``AdmissionReview`` (``admission.k8s.io/v1``) in and out.

* ``POST /mutate`` answers every review with ``allowed: true``; for a pod Muster manages it adds
  a base64 ``JSONPatch`` (``app.core.admission.pods.mutate``) and warnings saying what it could not
  classify. It never refuses a pod for reasons of its own.
* ``POST /validate`` refuses a pod whose gang metadata contradicts itself or its gang's live
  members in the cluster cache (``app.core.admission.pods.validate``).

Both echo the request ``uid``. Reviews of anything but a pod CREATE are allowed untouched. A
body that is not an AdmissionReview gets 400 with a message naming the problem (with
``failurePolicy: Ignore`` the API server then admits the pod as it is). A well-formed review
always gets 200, whatever its pod: a pod Muster cannot read (a field of the wrong type, an
unparsable quantity or GPU share) is admitted unmodified by ``/mutate`` with a warning naming
the field - the user sees it in kubectl's output - and refused by ``/validate`` with the same
words, as Muster could never schedule it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Sequence
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.errors import BadRequest, parse_body
from app.api.metrics import Metrics
from app.api.schemas import body, errors
from app.core.admission.pods import (
    Admission,
    AdmissionConfig,
    Fetched,
    GangPods,
    NamespaceMeta,
    OwnerFetch,
    agreed_min_member,
    mutate,
    validate,
)
from app.core.admission.workloads import WorkloadKind
from app.core.model.errors import InvalidInput
from app.core.model.status import Status
from app.core.model.values import Pod
from app.services import Services

log = logging.getLogger("muster.webhook")
router = APIRouter(tags=["admission"])

API_VERSION = "admission.k8s.io/v1"
_JSON = "application/json"
_STANDALONE = "Muster runs standalone, without access to the API server"
_INTERNAL = "muster: internal error in the webhook (see Muster's log)"


_ENVELOPE = ConfigDict(extra="ignore", strict=True)


class GroupVersionKind(BaseModel):
    """``request.kind``."""

    model_config = _ENVELOPE
    group: str = ""
    version: str = ""
    kind: str


class GroupVersionResource(BaseModel):
    """``request.resource``."""

    model_config = _ENVELOPE
    group: str = ""
    version: str = ""
    resource: str


class AdmissionRequest(BaseModel):
    """The parts of ``AdmissionReview.request`` Muster reads."""

    model_config = _ENVELOPE
    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: str = ""
    namespace: str = ""
    operation: str
    object: dict[str, Any] | None = Field(
        None,
        description="the object under review; for a pod CREATE, the Pod (any pod: one Muster "
        "cannot read is admitted with a warning by /mutate and refused by /validate)",
    )
    dryRun: bool | None = None


class AdmissionReview(BaseModel):
    """An ``admission.k8s.io/v1`` AdmissionReview request."""

    model_config = _ENVELOPE
    apiVersion: str = Field(json_schema_extra={"const": "admission.k8s.io/v1"})
    kind: str = Field(json_schema_extra={"const": "AdmissionReview"})
    request: AdmissionRequest


class Verdict(BaseModel):
    """``status`` of a refused review."""

    code: int
    reason: str
    message: str


class AdmissionResponse(BaseModel):
    """``AdmissionReview.response``."""

    uid: str
    allowed: bool
    patchType: Literal["JSONPatch"] | None = Field(None, description="with a patch")
    patch: str | None = Field(None, description="base64 of a JSONPatch array")
    warnings: list[str] | None = None
    status: Verdict | None = Field(None, description="why it was refused")


class AdmissionReviewOut(BaseModel):
    """The answer: an ``admission.k8s.io/v1`` AdmissionReview with ``response``."""

    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    response: AdmissionResponse


_DOC: dict[str, Any] = {
    "response_model": AdmissionReviewOut,
    "openapi_extra": body(AdmissionReview),
    "responses": errors(400, e400="not an AdmissionReview (v1); the error names the field"),
}


def _services(request: Request) -> Services:
    services: Services = request.app.state.muster
    return services


def _metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def _parse(body: bytes) -> AdmissionRequest:
    try:
        review = parse_body(AdmissionReview, body)
    except BadRequest as exc:
        # Not an AdmissionReview at all: 400 whatever part is wrong.
        raise BadRequest(400, f"not an AdmissionReview: {exc.message}", exc.field) from None
    if review.apiVersion != API_VERSION or review.kind != "AdmissionReview":
        raise BadRequest(
            400,
            f"expected apiVersion {API_VERSION} kind AdmissionReview, got "
            f"{review.apiVersion} {review.kind} (list only v1 in admissionReviewVersions)",
            "apiVersion",
        )
    return review.request


def _pod_create(req: AdmissionRequest) -> bool:
    return (
        req.operation == "CREATE"
        and req.kind.group == ""
        and req.kind.kind == "Pod"
        and not req.subResource
    )


_NO_POD = "request.object: missing (a pod CREATE carries the pod)"


def _answer(
    uid: str,
    *,
    patch: Sequence[dict[str, Any]] = (),
    warnings: Sequence[str] = (),
    denied: str = "",
) -> Response:
    response: dict[str, Any] = {"uid": uid, "allowed": not denied}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(
            json.dumps(list(patch), separators=(",", ":")).encode()
        ).decode()
    if warnings:
        response["warnings"] = list(warnings)
    if denied:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": denied}
    body = {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
    return Response(json.dumps(body, separators=(",", ":")), media_type=_JSON)


def admission_config(services: Services) -> AdmissionConfig:
    """The webhook's configuration from the server settings."""
    s = services.settings
    return AdmissionConfig(
        scheduler_name=s.scheduler_name,
        muster_namespace=s.muster_namespace,
        gang_gate=services.gang_gate,
    )


def _standalone_owner(kind: WorkloadKind, namespace: str, name: str) -> Fetched:
    return Fetched(None, _STANDALONE)


def _gang_pods(services: Services) -> GangPods:
    """The cached pods of a gang, from the cache's gang index (not a scan of every pod)."""

    def members(namespace: str, group: str) -> list[Pod]:
        return services.cache.gang_members_of(f"{namespace}/{group}")

    return members


class _NotCached(Exception):
    """A reader would have to call the API server."""


def _decide(
    services: Services, req: AdmissionRequest, pod: dict[str, Any], *, cached_only: bool
) -> Admission:
    """Run the pure decision with the cluster readers.

    With ``cached_only`` the readers answer from memory or raise ``_NotCached`` (the decision
    is pure, so it is simply run again, in a worker thread, without it); otherwise they may
    block on the API server.
    """
    namespace = req.namespace or str((pod.get("metadata") or {}).get("namespace") or "")
    ns_meta = NamespaceMeta()
    owners: OwnerFetch = _standalone_owner
    if services.namespaces is not None:
        if cached_only:
            peeked = services.namespaces.peek(namespace)
            if peeked is None:
                raise _NotCached
            ns_meta = peeked
        else:
            ns_meta = services.namespaces(namespace)
    if services.owners is not None:
        owners = services.owners
        if cached_only:
            peek = services.owners.peek

            def peeked_owner(kind: WorkloadKind, ns: str, name: str) -> Fetched:
                fetched = peek(kind, ns, name)
                if fetched is None:
                    raise _NotCached
                return fetched

            owners = peeked_owner

    members = _gang_pods(services)

    def group_min(ns: str, group: str) -> int | None:
        return agreed_min_member(members(ns, group), ns, group)

    return mutate(
        pod,
        namespace,
        ns_meta,
        owners,
        group_min,
        admission_config(services),
        services.cache.group,
    )


async def _review(
    request: Request,
) -> tuple[Services, AdmissionRequest, dict[str, Any] | None]:
    """The AdmissionReview's request and, for a pod being created, the pod (else ``None``;
    ``{}`` for a pod CREATE that carries none)."""
    req = _parse(await request.body())
    pod = (req.object if req.object is not None else {}) if _pod_create(req) else None
    return _services(request), req, pod


def _unreadable(problem: str) -> str:
    return f"muster: cannot read the pod: {problem}"


@router.post(
    "/mutate", summary="Mutating admission webhook: Muster's scheduler and gang labels", **_DOC
)
async def mutate_pod(request: Request) -> Response:
    """AdmissionReview in; ``allowed`` with a JSONPatch (base64) and warnings out."""
    with _metrics(request).observe_webhook("mutate"):
        return await _mutate(request)


async def _mutate(request: Request) -> Response:
    services, req, pod = await _review(request)
    if pod is None:
        return _answer(req.uid)
    if req.object is None:
        return _answer(req.uid, warnings=[f"{_unreadable(_NO_POD)}; admitted unmodified"])
    try:
        try:
            # Usually everything needed is cached: decide on the event loop (no thread hop).
            decision = _decide(services, req, pod, cached_only=True)
        except _NotCached:
            # An owner or namespace read would block on the API server: not on the loop.
            decision = await asyncio.to_thread(_decide, services, req, pod, cached_only=False)
    except InvalidInput as exc:
        log.info("admitted a pod in %s unmodified: %s", req.namespace, exc)
        return _answer(req.uid, warnings=[f"{_unreadable(str(exc))}; admitted unmodified"])
    except Exception:
        # A bug must not turn into a failed pod creation: admit the pod as it is, and say so.
        log.exception("mutating webhook failed on a pod in %s; admitted unmodified", req.namespace)
        return _answer(req.uid, warnings=[f"{_INTERNAL}; the pod is admitted unmodified"])
    who = f"{req.namespace}/{(pod.get('metadata') or {}).get('name') or '(generated)'}"
    if decision.warnings:
        log.info("admitted %s with warnings: %s", who, "; ".join(decision.warnings))
    if log.isEnabledFor(logging.DEBUG):
        log.debug("admitted %s: %s", who, decision.skipped or dict(decision.values))
    return _answer(req.uid, patch=decision.patch, warnings=decision.warnings)


def _judge(services: Services, req: AdmissionRequest, pod: dict[str, Any]) -> Status:
    return validate(pod, req.namespace, _gang_pods(services), admission_config(services))


@router.post("/validate", summary="Validating admission webhook: consistent gang metadata", **_DOC)
async def validate_pod(request: Request) -> Response:
    """AdmissionReview in; ``allowed``, or refused with a ``status.message`` saying why."""
    with _metrics(request).observe_webhook("validate"):
        return await _validate(request)


async def _validate(request: Request) -> Response:
    services, req, pod = await _review(request)
    if pod is None:
        return _answer(req.uid)
    if req.object is None:
        return _answer(req.uid, denied=_unreadable(_NO_POD))
    try:
        verdict = _judge(services, req, pod)  # memory only: the cluster cache
    except InvalidInput as exc:
        log.info("refused a pod in %s: %s", req.namespace, exc)
        return _answer(req.uid, denied=_unreadable(str(exc)))
    except Exception:
        log.exception("validating webhook failed on a pod in %s; allowed", req.namespace)
        return _answer(req.uid, warnings=[f"{_INTERNAL}; the pod was not checked"])
    if not verdict.ok:
        log.info("refused pod in %s: %s", req.namespace, verdict.reason)
    return _answer(req.uid, denied=verdict.reason)

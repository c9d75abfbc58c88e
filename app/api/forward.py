"""Followers forward the extender verbs to the leader.

With leader election every replica is ready once its cache has synced, and the Service sends
kube-scheduler to any of them. Only the leader holds plans, reservations and the bind barrier,
so a follower passes each verb (filter, prioritize, preempt, bind) through to the leader, at
the address the leader publishes on the Lease (``muster.io/endpoint``), and returns its answer
unchanged. While no leader is known (the Lease expired, a takeover under way), or when a
forwarded call reaches a replica that does not lead (leadership just moved), the answer is
503 with ``Connection: close``: kube-scheduler retries the pod, on a new connection.

A pure ASGI middleware: on the leader a verb costs one dict lookup more.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Callable, Collection

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import send_json
from app.services import Services
from app.settings import Settings

log = logging.getLogger("muster.forward")


#: Marks a forwarded call: it is never forwarded again.
FORWARDED = "x-muster-forwarded"
#: Longer than any verb takes on the leader (a bind waits up to the barrier, 4 s by default);
#: kube-scheduler's own ``httpTimeout`` ends the call first.
TIMEOUT = 10.0


class ForwardToLeader:
    """ASGI middleware: serve the verbs here when leading, else forward them (see module)."""

    def __init__(
        self, app: ASGIApp, services: Callable[[], Services], verbs: Collection[str]
    ) -> None:
        """``verbs``: the paths kube-scheduler posts to (the extender router's)."""
        self.app = app
        self._services = services
        self._verbs = frozenset(verbs)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self._verbs:
            await self.app(scope, receive, send)
            return
        services = self._services()
        if services.leading:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        leader = services.leader_url
        if leader is None or FORWARDED.encode() in headers:
            await _unavailable(send, "this Muster replica does not lead and knows no leader")
            return
        body = await _body(receive)
        shared: httpx.AsyncClient | None = (
            getattr(scope["app"].state, "forwarder", None) if "app" in scope else None
        )
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = shared
                if client is None:
                    client = await stack.enter_async_context(client_for_forwarding())
                answer = await client.post(
                    leader.rstrip("/") + scope["path"],
                    content=body,
                    headers={"content-type": "application/json", FORWARDED: "1"},
                )
        except httpx.HTTPError as exc:
            log.info("forwarding %s to the leader at %s failed: %s", scope["path"], leader, exc)
            await _unavailable(send, f"the leader at {leader} did not answer ({exc})")
            return
        await send(
            {
                "type": "http.response.start",
                "status": answer.status_code,
                "headers": [
                    (b"content-type", answer.headers.get("content-type", "").encode()),
                    (b"content-length", str(len(answer.content)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer.content})


def client_for_forwarding(settings: Settings | None = None) -> httpx.AsyncClient:
    """The HTTP client a follower forwards with (the app keeps one for its lifetime: building
    one costs more than the call).

    When the extender requires client certificates (``--client-ca``), the leader's does too:
    the follower presents its own serving certificate (``muster certs`` and deploy/'s
    cert-manager Certificate give it clientAuth as well) and checks the leader's against the
    same CA. The leader is reached by pod IP, which the certificate does not name, so the
    chain is checked and the host name is not."""
    if settings is None or settings.client_ca is None or settings.tls_cert is None:
        return httpx.AsyncClient(timeout=TIMEOUT, verify=False, trust_env=False)
    context = ssl.create_default_context(cafile=str(settings.client_ca))
    context.check_hostname = False
    context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key or settings.tls_cert))
    return httpx.AsyncClient(timeout=TIMEOUT, verify=context, trust_env=False)


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _unavailable(send: Send, why: str) -> None:
    # Connection: close, so kube-scheduler retries on a new connection (maybe another replica).
    await send_json(send, 503, {"detail": f"{why}; retry"}, ((b"connection", b"close"),))

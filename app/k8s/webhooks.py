"""Write a CA bundle into Muster's Mutating- and ValidatingWebhookConfiguration (``muster certs
--patch``).

Every webhook of each configuration gets ``clientConfig.caBundle``; a JSON patch with a ``test``
of each webhook's name makes a concurrent reordering fail instead of patching the wrong entry.
"""

from __future__ import annotations

import json
from typing import Any, cast

from kubernetes.client import AdmissionregistrationV1Api, ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3 import BaseHTTPResponse
from urllib3.exceptions import HTTPError

from app.core.model.errors import MusterError
from app.k8s.gateway import status_message

_TIMEOUT = (5.0, 10.0)


def ca_bundle_patch(config: dict[str, Any], ca_bundle: str) -> list[dict[str, Any]]:
    """JSON patch operations setting ``caBundle`` on every webhook of ``config`` (API JSON)."""
    ops: list[dict[str, Any]] = []
    for i, webhook in enumerate(config.get("webhooks") or []):
        ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": webhook.get("name")})
        ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle",
                    "value": ca_bundle})  # fmt: skip
    return ops


def patch_ca_bundle(api: ApiClient, name: str, ca_bundle: str) -> list[str]:
    """Set ``caBundle`` in the Mutating- and ValidatingWebhookConfiguration ``name``.

    Returns one line per configuration saying what happened. A configuration that does not
    exist is reported and skipped; if neither exists, or the API refuses, ``MusterError``.
    """
    admission = AdmissionregistrationV1Api(api)
    kinds = (
        ("MutatingWebhookConfiguration", admission.read_mutating_webhook_configuration,
         admission.patch_mutating_webhook_configuration),
        ("ValidatingWebhookConfiguration", admission.read_validating_webhook_configuration,
         admission.patch_validating_webhook_configuration),
    )  # fmt: skip
    report: list[str] = []
    patched = 0
    for kind, read, patch in kinds:
        try:
            # With _preload_content=False the client returns the raw urllib3 response, not
            # the model its annotations name.
            response = cast(
                BaseHTTPResponse, read(name, _preload_content=False, _request_timeout=_TIMEOUT)
            )
            config = json.loads(response.data)
            ops = ca_bundle_patch(config, ca_bundle)
            if not ops:
                report.append(f"{kind} {name} has no webhooks; nothing to patch")
                continue
            patch(name, ops, _preload_content=False, _request_timeout=_TIMEOUT,
                  _content_type="application/json-patch+json")  # fmt: skip
        except ApiException as exc:
            if exc.status == 404:
                report.append(f"{kind} {name} not found; skipped")
                continue
            raise MusterError(f"cannot patch {kind} {name}: {status_message(exc)}") from exc
        except (HTTPError, OSError, ValueError) as exc:
            raise MusterError(f"cannot patch {kind} {name}: {exc}") from exc
        patched += 1
        report.append(f"{kind} {name}: caBundle set on {len(ops) // 2} webhook(s)")
    if not patched:
        raise MusterError(
            f"no webhook configuration named {name!r} to patch ({'; '.join(report)}); "
            f"apply deploy/ first"
        )
    return report

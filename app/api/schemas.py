"""The OpenAPI document's schemas for what the server really accepts and answers.

Embedded Kubernetes objects (a Pod in ``ExtenderArgs``, the Nodes of ``Nodes.items``, victims)
are raw JSON translated by ``app.core.model.parse``; the schemas here describe exactly the
fields that translation reads, with the types and patterns it enforces, and leave every other
field open (``additionalProperties``), as the API server's objects carry many more. A request
that fits these schemas is accepted; one that does not gets a 4xx naming the field.

The rules a JSON Schema cannot state are written in the descriptions: a GPU share
(``muster.io/gpu-fraction``) is a decimal in (0, 1] and cannot be combined with an
``nvidia.com/gpu`` request.

``body`` and ``errors`` build the ``openapi_extra``/``responses`` of routes whose handlers
parse their own bodies (``app.api.errors.parse_body``); every ``$ref`` is inlined, so the
document has no dangling references.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from app.core.model.quantity import MAX_MILLI, QUANTITY_PATTERN

_JSON = "application/json"


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or ``null`` (a field Kubernetes may send as ``null``)."""
    return {"anyOf": [schema, {"type": "null"}]}


#: A string field that may be null or absent (read as "").
TEXT = nullable({"type": "string"})
#: A label or annotation map: string values (null reads as "").
STRING_MAP = nullable({"type": "object", "additionalProperties": TEXT})
#: A resource quantity, as the API server serializes it (``100m``, ``8Gi``) or a number.
QUANTITY = {
    "description": (
        "A Kubernetes quantity: a non-negative decimal with an optional exponent or suffix "
        f"(n u m k M G T P E Ki Mi Gi Ti Pi Ei), or a non-negative number. Amounts above "
        f"{MAX_MILLI} thousandths count as that much."
    ),
    "anyOf": [
        {"type": "string", "pattern": QUANTITY_PATTERN},
        {"type": "number", "minimum": 0},
    ],
}
QUANTITY_MAP = nullable({"type": "object", "additionalProperties": QUANTITY})
#: RFC 3339, or empty / null for unknown.
TIMESTAMP = {
    "anyOf": [
        {"type": "string", "format": "date-time"},
        {"type": "string", "maxLength": 0},
        {"type": "null"},
    ]
}


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


_RESOURCES = nullable(_object({"requests": QUANTITY_MAP, "limits": QUANTITY_MAP}))
_CONTAINER = nullable(_object({"resources": _RESOURCES}))
_CONTAINERS = nullable({"type": "array", "items": _CONTAINER})
_REQUIREMENT = _object(
    {
        "key": TEXT,
        "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]},
        "values": nullable({"type": "array", "items": TEXT}),
    },
    ["operator"],
)
_REQUIREMENTS = nullable({"type": "array", "items": _REQUIREMENT})
_TERM = nullable(_object({"matchExpressions": _REQUIREMENTS, "matchFields": _REQUIREMENTS}))
_AFFINITY = nullable(
    _object(
        {
            "nodeAffinity": nullable(
                _object(
                    {
                        "requiredDuringSchedulingIgnoredDuringExecution": nullable(
                            _object(
                                {"nodeSelectorTerms": nullable({"type": "array", "items": _TERM})}
                            )
                        )
                    }
                )
            )
        }
    )
)
_TOLERATION = nullable(_object({"key": TEXT, "operator": TEXT, "value": TEXT, "effect": TEXT}))
_METADATA_PROPERTIES = {
    "name": {"type": "string", "minLength": 1},
    "namespace": TEXT,
    "uid": TEXT,
    "labels": STRING_MAP,
    "annotations": {
        **STRING_MAP,
        "description": (
            "muster.io/gpu-fraction (label or annotation): a decimal in (0, 1], never together "
            "with an nvidia.com/gpu request"
        ),
    },
    "creationTimestamp": TIMESTAMP,
}

#: A pod's ``spec`` as Muster reads it (scheduling fields only).
POD_SPEC = nullable(
    _object(
        {
            "priority": nullable({"type": "integer"}),
            "priorityClassName": TEXT,
            "schedulerName": TEXT,
            "nodeName": TEXT,
            "nodeSelector": STRING_MAP,
            "containers": _CONTAINERS,
            "initContainers": _CONTAINERS,
            "overhead": QUANTITY_MAP,
            "tolerations": nullable({"type": "array", "items": _TOLERATION}),
            "affinity": _AFFINITY,
        }
    )
)

#: A v1 Pod (kube-scheduler embeds it without kind/apiVersion); other fields are ignored.
POD: dict[str, Any] = {
    **_object(
        {
            "metadata": _object(_METADATA_PROPERTIES, ["name"]),
            "spec": POD_SPEC,
            "status": nullable(_object({"phase": TEXT, "startTime": TIMESTAMP})),
        },
        ["metadata"],
    ),
    "description": "A v1 Pod as the API server serializes it; Muster reads the fields listed.",
}

#: A pod template (what-if): labels and annotations, and a pod spec.
POD_TEMPLATE: dict[str, Any] = {
    **_object(
        {
            "metadata": nullable(
                _object({"labels": STRING_MAP, "annotations": _METADATA_PROPERTIES["annotations"]})
            ),
            "spec": POD_SPEC,
        }
    ),
    "description": "A pod template (metadata.labels/annotations, spec).",
}

#: A v1 Node; allocatable (else capacity), labels, taints, unschedulable.
NODE: dict[str, Any] = {
    **_object(
        {
            "metadata": _object(
                {
                    "name": {"type": "string", "minLength": 1},
                    "labels": STRING_MAP,
                    "annotations": STRING_MAP,
                },  # fmt: skip
                ["name"],
            ),
            "spec": nullable(
                _object(
                    {
                        "unschedulable": nullable({"type": "boolean"}),
                        "taints": nullable(
                            {
                                "type": "array",
                                "items": nullable(
                                    _object({"key": TEXT, "value": TEXT, "effect": TEXT})
                                ),
                            }
                        ),
                    }
                )
            ),
            "status": nullable(_object({"allocatable": QUANTITY_MAP, "capacity": QUANTITY_MAP})),
        },
        ["metadata"],
    ),
    "description": "A v1 Node as the API server serializes it; Muster reads the fields listed.",
}


class ErrorOut(BaseModel):
    """A refused request: what is wrong, and the field (empty when the body is not JSON)."""

    error: str
    field: str


def inlined(schema: Any, defs: dict[str, Any]) -> Any:
    """``schema`` with every local ``$ref`` replaced by its definition (no ``$defs`` left)."""
    if isinstance(schema, dict):
        ref = schema.get("$ref", "")
        if ref.startswith("#/$defs/"):
            return inlined(defs[ref.removeprefix("#/$defs/")], defs)
        # A discriminator's mapping points into $defs too; the oneOf says the same without it.
        return {
            k: inlined(v, defs) for k, v in schema.items() if k not in ("$defs", "discriminator")
        }
    if isinstance(schema, list):
        return [inlined(v, defs) for v in schema]
    return schema


def schema_of(model: type[BaseModel], mode: str = "validation") -> dict[str, Any]:
    """``model``'s JSON Schema, self-contained (every ``$ref`` inlined)."""
    schema = model.model_json_schema(mode="validation" if mode == "validation" else "serialization")
    result: dict[str, Any] = inlined(schema, schema.get("$defs", {}))
    return result


def body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` documenting a JSON body the handler parses itself."""
    return {
        "requestBody": {
            "required": True,
            "content": {_JSON: {"schema": schema_of(model)}},
        }
    }


def errors(*codes: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """``responses`` for the 4xx a route answers, each with the ``ErrorOut`` body."""
    default = {
        400: "the body is empty, not JSON or not a JSON object (`field` is empty)",
        404: "not found",
        422: "a field is wrong; `field` names it",
        503: "not ready",
    }
    return {
        code: {"description": descriptions.get(f"e{code}", default[code]), "model": ErrorOut}
        for code in codes
    }


def honest(document: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's generated document made to match this server: the 422 it describes for
    parameter errors (``HTTPValidationError``) is answered by ``app.api.errors`` as
    ``ErrorOut``, so every such response says that instead."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("ErrorOut", schema_of(ErrorOut))
    fastapi_422 = "#/components/schemas/HTTPValidationError"
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            answer = operation.get("responses", {}).get("422")
            content = (answer or {}).get("content", {}).get(_JSON, {})
            if content.get("schema", {}).get("$ref") == fastapi_422:
                answer["description"] = "a parameter is wrong; `field` names it"
                content["schema"] = {"$ref": "#/components/schemas/ErrorOut"}
    if fastapi_422 not in json.dumps(document["paths"]):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
    return document

"""Which admission configurations see the Bindings Muster creates.

A gang is bound only whole. Where an admission webhook or policy may refuse a Binding, Muster
first sends every member's Binding as a dry run, so a refusal leaves no member bound
(``app.core.verbs.gangbind``); where nothing at admission looks at Bindings, the dry runs are
requests the API server answers for nothing. This module reads the configurations the API
server serves (``ADMISSION_KINDS``; ``app.k8s.admission`` lists and watches them) and names
those that match ``CREATE`` of ``pods/binding`` in the core ``v1`` API, the request
``POST /api/v1/namespaces/NS/pods/NAME/binding`` that Muster sends.

A rule matches as the API server matches it: ``operations`` holds ``CREATE`` or ``*``;
``apiGroups`` holds ``""`` or ``*``; ``apiVersions`` holds ``v1`` or ``*``; ``resources`` holds
``pods/binding``, ``pods/*``, ``*/binding`` or ``*/*`` (a bare ``*`` or ``pods`` means no
subresource); ``scope`` is absent, ``*`` or ``Namespaced``. What narrows a match further
(namespace and object selectors, match conditions, a policy's exclusions or its bindings) is
not read: a configuration that might see a Binding counts as one that does. A configuration
whose rules are not lists of the documented shape counts too (the API server validated it, so
it is a shape this module does not know).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: ``resources`` entries that cover the ``binding`` subresource of pods.
BINDING_RESOURCES = frozenset({"pods/binding", "pods/*", "*/binding", "*/*"})


@dataclass(frozen=True, slots=True)
class AdmissionKind:
    """A kind of admission configuration and where the API serves it (``versions`` in order
    of preference); ``webhooks``: its rules are under ``webhooks[].rules`` (a webhook
    configuration), else under ``spec.matchConstraints.resourceRules`` (a policy)."""

    source: str
    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    webhooks: bool
    needs: str


_GROUP = "admissionregistration.k8s.io"
ADMISSION_KINDS: tuple[AdmissionKind, ...] = (
    AdmissionKind("validating-webhooks", _GROUP, ("v1", "v1beta1"),
                  "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", True,
                  "Kubernetes 1.16+ (v1; v1beta1 before)"),
    AdmissionKind("mutating-webhooks", _GROUP, ("v1", "v1beta1"),
                  "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", True,
                  "Kubernetes 1.16+ (v1; v1beta1 before)"),
    AdmissionKind("validating-policies", _GROUP, ("v1", "v1beta1", "v1alpha1"),
                  "validatingadmissionpolicies", "ValidatingAdmissionPolicy", False,
                  "Kubernetes 1.30+ (v1), 1.28+ (v1beta1), 1.26+ with the feature gate"),
    AdmissionKind("mutating-policies", _GROUP, ("v1", "v1beta1", "v1alpha1"),
                  "mutatingadmissionpolicies", "MutatingAdmissionPolicy", False,
                  "Kubernetes 1.34+ (v1beta1), 1.32+ with the feature gate"),
)  # fmt: skip


def binding_matchers(obj: Mapping[str, Any], kind: AdmissionKind) -> tuple[str, ...]:
    """The names of what in ``obj`` (one configuration of ``kind``) may see Muster's Bindings:
    each matching webhook of a webhook configuration (``CONFIG/WEBHOOK``), or the policy
    itself (``POLICY``); empty when nothing does."""
    meta = obj.get("metadata")
    name = str(meta.get("name", "?")) if isinstance(meta, Mapping) else "?"
    if kind.webhooks:
        webhooks = obj.get("webhooks")
        if webhooks is None:
            return ()
        if not isinstance(webhooks, list):
            return (f"{name}/?",)
        found = []
        for i, webhook in enumerate(webhooks):
            if not isinstance(webhook, Mapping):
                found.append(f"{name}/[{i}]")
            elif _any_matches(webhook.get("rules")):
                found.append(f"{name}/{webhook.get('name', f'[{i}]')}")
        return tuple(found)
    spec = obj.get("spec")
    constraints = spec.get("matchConstraints") if isinstance(spec, Mapping) else None
    if constraints is None:
        return ()
    if not isinstance(constraints, Mapping):
        return (name,)
    return (name,) if _any_matches(constraints.get("resourceRules")) else ()


def _any_matches(rules: Any) -> bool:
    if rules is None:
        return False
    if not isinstance(rules, list):
        return True
    return any(not isinstance(r, Mapping) or _matches(r) for r in rules)


def _matches(rule: Mapping[str, Any]) -> bool:
    scope = rule.get("scope")
    if scope not in (None, "*", "Namespaced"):
        return False
    return (
        _holds(rule.get("operations"), ("CREATE", "*"))
        and _holds(rule.get("apiGroups"), ("", "*"))
        and _holds(rule.get("apiVersions"), ("v1", "*"))
        and _holds(rule.get("resources"), BINDING_RESOURCES)
    )


def _holds(values: Any, wanted: Iterable[str]) -> bool:
    """Whether the list ``values`` names one of ``wanted``; an absent or odd list counts as
    naming them (see the module)."""
    if not isinstance(values, list):
        return True
    return any(v in values for v in wanted)

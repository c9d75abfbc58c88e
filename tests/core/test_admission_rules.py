"""``binding_matchers``: which admission configurations may see the Bindings Muster creates
(``CREATE`` of ``pods/binding`` in core ``v1``), read from the documented object shapes of
``admissionregistration.k8s.io`` (webhook configurations ``v1``; Validating- and
MutatingAdmissionPolicy ``v1`` / ``v1beta1``)."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.model.admissionrules import ADMISSION_KINDS, AdmissionKind, binding_matchers

KINDS = {k.kind: k for k in ADMISSION_KINDS}
BINDING = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
           "resources": ["pods/binding"], "scope": "Namespaced"}  # fmt: skip


def rule(**changes: Any) -> dict[str, Any]:
    return {**BINDING, **changes}


def webhook_config(kind: str, *webhooks: tuple[str, list[Any] | None]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "cfg"},
        "webhooks": [
            {"name": name, "clientConfig": {"url": "https://x"}, "sideEffects": "None",
             "admissionReviewVersions": ["v1"], **({"rules": rules} if rules is not None else {})}
            for name, rules in webhooks
        ],
    }  # fmt: skip


def policy(kind: str, rules: list[Any] | None) -> dict[str, Any]:
    constraints = {"resourceRules": rules} if rules is not None else {}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "pol"},
        "spec": {"matchConstraints": constraints, "validations": [{"expression": "true"}]},
    }


#: (what, rules of one webhook, whether it sees Muster's Bindings)
RULES: list[tuple[str, list[Any] | None, bool]] = [
    ("exactly pods/binding", [BINDING], True),
    ("every subresource of pods", [rule(resources=["pods/*"])], True),
    ("binding of every resource", [rule(resources=["*/binding"])], True),
    ("everything with subresources", [rule(resources=["*/*"])], True),
    ("pods only: no subresource", [rule(resources=["pods"])], False),
    ("a bare star: resources, not subresources", [rule(resources=["*"])], False),
    ("the legacy bindings resource is another request", [rule(resources=["bindings"])], False),
    ("pods/eviction only", [rule(resources=["pods/eviction"])], False),
    ("any operation", [rule(operations=["*"])], True),
    ("UPDATE and DELETE only", [rule(operations=["UPDATE", "DELETE"])], False),
    ("CONNECT only", [rule(operations=["CONNECT"])], False),
    ("every group", [rule(apiGroups=["*"])], True),
    ("apps only", [rule(apiGroups=["apps"])], False),
    ("every version", [rule(apiVersions=["*"])], True),
    ("v1beta1 only", [rule(apiVersions=["v1beta1"])], False),
    ("any scope", [rule(scope="*")], True),
    ("no scope given (the default is *)", [{k: v for k, v in BINDING.items() if k != "scope"}],
     True),
    ("cluster scope only", [rule(scope="Cluster")], False),
    ("the second rule matches", [rule(resources=["pods"]), rule(resources=["pods/*"])], True),
    ("no rules", [], False),
    ("rules absent", None, False),
    ("a rule of an unknown shape counts", ["pods/binding"], True),
    ("resources not a list counts", [rule(resources="pods/binding")], True),
]  # fmt: skip


@pytest.mark.parametrize("kind", ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"])
@pytest.mark.parametrize(("what", "rules", "sees"), RULES, ids=[r[0] for r in RULES])
def test_webhook_rules(kind: str, what: str, rules: list[Any] | None, sees: bool) -> None:
    config = webhook_config(kind, ("other.example.com", [rule(resources=["pods"])]),
                            ("w.example.com", rules))  # fmt: skip
    assert binding_matchers(config, KINDS[kind]) == (("cfg/w.example.com",) if sees else ())


@pytest.mark.parametrize("kind", ["ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"])
@pytest.mark.parametrize(("what", "rules", "sees"), RULES, ids=[r[0] for r in RULES])
def test_policy_rules(kind: str, what: str, rules: list[Any] | None, sees: bool) -> None:
    named = [r if not isinstance(r, dict) else {**r, "resourceNames": []} for r in rules or ()]
    body = policy(kind, named if rules is not None else None)
    assert binding_matchers(body, KINDS[kind]) == (("pol",) if sees else ())


#: Objects of odd shape: (what, object, kind, what it names).
ODD: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
    ("a configuration without webhooks", {"metadata": {"name": "cfg"}},
     "ValidatingWebhookConfiguration", ()),
    ("webhooks not a list", {"metadata": {"name": "cfg"}, "webhooks": {}},
     "MutatingWebhookConfiguration", ("cfg/?",)),
    ("a webhook not an object", {"metadata": {"name": "cfg"}, "webhooks": ["x"]},
     "MutatingWebhookConfiguration", ("cfg/[0]",)),
    ("a nameless matching webhook",
     {"metadata": {"name": "cfg"}, "webhooks": [{"rules": [BINDING]}]},
     "ValidatingWebhookConfiguration", ("cfg/[0]",)),
    ("a policy without spec", {"metadata": {"name": "pol"}}, "ValidatingAdmissionPolicy", ()),
    ("matchConstraints not an object", {"metadata": {"name": "pol"},
                                        "spec": {"matchConstraints": []}},
     "ValidatingAdmissionPolicy", ("pol",)),
    ("no metadata", {"webhooks": [{"name": "w", "rules": [BINDING]}]},
     "ValidatingWebhookConfiguration", ("?/w",)),
]  # fmt: skip


@pytest.mark.parametrize(("what", "obj", "kind", "names"), ODD, ids=[o[0] for o in ODD])
def test_odd_shapes(what: str, obj: dict[str, Any], kind: str, names: tuple[str, ...]) -> None:
    assert binding_matchers(obj, KINDS[kind]) == names


def test_every_kind_is_in_admissionregistration() -> None:
    assert {k.group for k in ADMISSION_KINDS} == {"admissionregistration.k8s.io"}
    assert len({k.source for k in ADMISSION_KINDS}) == len(ADMISSION_KINDS) == 4
    assert all(isinstance(k, AdmissionKind) and k.versions[0] == "v1" for k in ADMISSION_KINDS)

"""``BindAdmission``: a gang's Bindings go as dry runs first exactly while admission may see
them, or while that is not known; the gang binder asks it before every gang's binds."""

from __future__ import annotations

import asyncio

import pytest

from app.core.model.errors import GatewayError
from app.core.state.bindadmission import BindAdmission
from app.core.verbs.bind import BindOutcome
from tests.core.gangsim import Cluster
from tests.core.test_gangs import member
from tests.factories import node

W = "validating-webhooks"
P = "validating-policies"

#: (what happens, in order; whether dry runs are wanted after it). Steps: ("known",),
#: ("replace", source, {name: matches}), ("upsert", source, name, matches),
#: ("delete", source, name), ("drop", source).
STORIES: list[tuple[str, list[tuple[object, ...]], bool]] = [
    ("nothing listed yet", [], True),
    ("listed, nothing sees Bindings", [("replace", W, {"a": ()}), ("known",)], False),
    ("a listed webhook sees Bindings", [("replace", W, {"a": ("a/w",)}), ("known",)], True),
    ("lists in but not all kinds listed yet", [("replace", W, {})], True),
    ("a webhook added later", [("known",), ("upsert", W, "a", ("a/w",))], True),
    ("the webhook changed to pods only", [("known",), ("upsert", W, "a", ("a/w",)),
                                          ("upsert", W, "a", ())], False),
    ("the webhook deleted", [("known",), ("upsert", W, "a", ("a/w",)), ("delete", W, "a")],
     False),
    ("a policy stays when a webhook goes", [("known",), ("upsert", W, "a", ("a/w",)),
                                             ("upsert", P, "p", ("p",)), ("delete", W, "a")],
     True),
    ("policies no longer served", [("known",), ("upsert", P, "p", ("p",)), ("drop", P)], False),
    ("a relist without it", [("known",), ("upsert", W, "a", ("a/w",)), ("replace", W, {})],
     False),
    ("deleting what was never seen", [("known",), ("delete", W, "x"), ("drop", P)], False),
]  # fmt: skip


def tell(admission: BindAdmission, steps: list[tuple[object, ...]]) -> None:
    for step in steps:
        verb, *args = step
        getattr(admission, {"known": "mark_known"}.get(str(verb), str(verb)))(*args)


@pytest.mark.parametrize(("what", "steps", "wanted"), STORIES, ids=[s[0] for s in STORIES])
def test_dry_runs_wanted(what: str, steps: list[tuple[object, ...]], wanted: bool) -> None:
    admission = BindAdmission()
    tell(admission, steps)
    assert admission.dry_run_wanted() is wanted
    assert admission.describe()["dryRun"] is wanted


@pytest.mark.parametrize(("what", "steps", "wanted"), STORIES, ids=[s[0] for s in STORIES])
def test_always_means_always(what: str, steps: list[tuple[object, ...]], wanted: bool) -> None:
    admission = BindAdmission("always")
    tell(admission, steps)
    assert admission.dry_run_wanted() is True


def test_a_failing_watch_turns_dry_runs_on_until_it_works_again() -> None:
    admission = BindAdmission()
    tell(admission, [("replace", W, {}), ("known",)])
    working = [True]
    admission.watch_health(lambda: working[0])
    assert not admission.dry_run_wanted()
    working[0] = False
    assert admission.dry_run_wanted()
    assert admission.describe() == {"mode": "auto", "known": False, "seeBindings": [],
                                    "dryRun": True}  # fmt: skip
    working[0] = True
    assert not admission.dry_run_wanted() and admission.describe()["known"]


def test_an_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="expected auto or always, got 'never'"):
        BindAdmission("never")  # type: ignore[arg-type]


def test_describe_names_what_sees_bindings() -> None:
    admission = BindAdmission()
    tell(admission, [("replace", W, {"b": ("b/x", "b/y"), "a": ("a/w",)}),
                     ("upsert", P, "p", ("p",)), ("known",)])  # fmt: skip
    assert admission.describe() == {
        "mode": "auto", "known": True, "seeBindings": ["a/w", "b/x", "b/y", "p"], "dryRun": True,
    }  # fmt: skip


def bind_gang(
    admission: BindAdmission | None, refuse: str = ""
) -> tuple[list[str], list[BindOutcome], Cluster]:
    """Bind a 4-member gang through a blocking (API-server-like) gateway that refuses the
    real Binding of member ``refuse`` (if any): the members asked about in dry runs, the
    outcomes of the bind calls, and the cluster."""
    asked: list[str] = []
    cluster = Cluster([node("n", gpus=8)], bind_admission=admission)
    cluster.gateway.blocking = True  # type: ignore[misc]
    real_bind = cluster.gateway.bind

    def check_bind(namespace: str, name: str, uid: str, node: str) -> None:
        asked.append(name)

    def bind(namespace: str, name: str, uid: str, node: str, annotations: object = None) -> None:
        if name == refuse:
            raise GatewayError("Forbidden", 'admission webhook "new" denied the request')
        real_bind(namespace, name, uid, node, annotations)  # type: ignore[arg-type]

    cluster.gateway.check_bind = check_bind  # type: ignore[method-assign]
    cluster.gateway.bind = bind  # type: ignore[method-assign]
    gang = [member("g", i) for i in range(4)]
    cluster.cache.upsert_pods(gang)

    async def scenario() -> list[BindOutcome]:
        attempts = [cluster.attempt(p) for p in gang]
        return list(await asyncio.gather(*(t.bind for t in attempts if t.bind)))

    outcomes = asyncio.run(scenario())
    return sorted(asked), outcomes, cluster


def bound_whole(admission: BindAdmission | None) -> list[str]:
    """``bind_gang`` with no refusal: every member bound; the members asked about."""
    asked, outcomes, cluster = bind_gang(admission)
    assert [o.error for o in outcomes] == [""] * 4
    assert all(cluster.bound(p) == "n" for p in cluster.cache.snapshot().pods.values())
    return asked


def test_a_gang_binds_without_dry_runs_where_admission_sees_no_binding() -> None:
    admission = BindAdmission()
    tell(admission, [("replace", W, {"muster": ()}), ("known",)])
    asked = bound_whole(admission)
    assert asked == []


def test_a_gang_binds_after_dry_runs_where_a_webhook_sees_bindings() -> None:
    admission = BindAdmission()
    tell(admission, [("replace", W, {"guard": ("guard/binds.example.com",)}), ("known",)])
    asked = bound_whole(admission)
    assert asked == ["g-0", "g-1", "g-2", "g-3"]


def test_a_gang_binds_after_dry_runs_until_admission_is_known() -> None:
    asked = bound_whole(BindAdmission())
    assert asked == ["g-0", "g-1", "g-2", "g-3"]
    asked = bound_whole(None)  # no BindAdmission at all: always
    assert asked == ["g-0", "g-1", "g-2", "g-3"]


def test_a_refusal_without_dry_runs_still_leaves_no_partial_gang() -> None:
    """Nothing was known to see Bindings, yet one member's Binding is refused: the members
    bound are deleted (their controller makes them again), so no partial gang keeps GPUs."""
    admission = BindAdmission()
    tell(admission, [("known",)])
    asked, outcomes, cluster = bind_gang(admission, refuse="g-2")
    assert asked == []
    assert {o.reason for o in outcomes} == {"RolledBack"}
    assert sorted(cluster.gateway.deletions) == ["default/g-0", "default/g-1", "default/g-3"]
    assert cluster.cache.view().used_of("n").gpu == 0

"""The one result type: codes, reasons, and no truth value."""

from __future__ import annotations

import pytest

from app.core.model.status import SUCCESS, Code, Status


@pytest.mark.parametrize(
    ("status", "code", "ok"),
    [
        (SUCCESS, Code.SUCCESS, True),
        (Status.unschedulable("node n1 no longer has room"), Code.UNSCHEDULABLE, False),
        (Status.unresolvable("queue ghost does not exist"), Code.UNRESOLVABLE, False),
        (Status.wait("gang ml/a: waiting for members"), Code.WAIT, False),
        (Status.error("Conflict: the pod changed"), Code.ERROR, False),
    ],
)
def test_codes_say_how_to_react(status: Status, code: Code, ok: bool) -> None:
    assert status.code is code
    assert status.ok is ok


def test_a_status_cannot_be_mistaken_for_a_truth_value() -> None:
    with pytest.raises(TypeError, match="no truth value"):
        bool(Status.unschedulable("full"))


def test_prefixed_keeps_the_code_and_str_is_the_reason() -> None:
    status = Status.unschedulable("2 free").prefixed("node n1: ")
    assert (status.code, str(status)) == (Code.UNSCHEDULABLE, "node n1: 2 free")
    assert str(SUCCESS) == "success"

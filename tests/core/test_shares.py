"""Queue shares over time: what one sample holds, the bounded history, the sampler thread."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from app.core.insight.shares import ShareHistory, ShareSampler, shares_of
from app.core.model.queues import OPEN
from app.core.state.queueusage import QueueUsage


def usage(gpu_used: int, gpu_pending: int = 0) -> QueueUsage:
    """The open queue on a 16-GPU, 64-cpu cluster (milli units)."""
    out = QueueUsage(OPEN, np.array([16_000, 64_000, 256 * 2**30 * 1000, 110_000]))
    out.add("default", np.array([gpu_used, 8_000, 0, 1]))
    if gpu_pending:
        out.add("default", np.array([gpu_pending, 0, 0, 1]), pending=True)
    return out


def test_a_sample_holds_used_and_deserved_fractions_of_the_cluster() -> None:
    shares = shares_of(usage(4_000, gpu_pending=8_000))
    assert shares["default"].used == (0.25, 0.125, 0.0)
    assert shares["default"].deserved == (0.75, 0.125, 0.0)  # all it asks for: 12 of 16


def test_the_history_is_bounded_and_numbered() -> None:
    history = ShareHistory(capacity=3)
    for i in range(5):
        history.record(100.0 + i, usage(1_000 * i))
    assert history.last_seq == 5
    assert [s.seq for s in history.since()] == [3, 4, 5]  # the oldest two are gone
    assert [s.seq for s in history.since(4)] == [5]
    assert [s.seq for s in history.since(0, limit=2)] == [4, 5]
    assert history.since(5) == []
    with pytest.raises(ValueError):
        ShareHistory(capacity=0)


def measurer(fail_at: int = 0) -> tuple[Callable[[], QueueUsage], threading.Event]:
    """A measure that raises on call ``fail_at`` (0: never), and an event set from call 3."""
    third = threading.Event()
    calls = 0

    def measure() -> QueueUsage:
        nonlocal calls
        calls += 1
        if calls == fail_at:
            raise RuntimeError("boom")
        if calls >= 3:
            third.set()
        return usage(2_000)

    return measure, third


def test_the_sampler_records_at_start_and_then_every_interval() -> None:
    history = ShareHistory()
    measure, measured = measurer()
    sampler = ShareSampler(history, measure, interval=0.01, wall=lambda: 42.0)
    before = set(threading.enumerate())
    sampler.start()
    assert history.last_seq >= 1  # one sample at once
    assert measured.wait(10)
    sampler.stop()
    count = history.last_seq
    assert count >= 3 and all(s.time == 42.0 for s in history.since())
    assert set(threading.enumerate()) <= before  # its thread has ended
    assert history.last_seq == count  # stopped


def test_a_failing_measure_does_not_end_the_history() -> None:
    history = ShareHistory()
    measure, done = measurer(fail_at=2)
    sampler = ShareSampler(history, measure, interval=0.01, wall=lambda: 1.0)
    sampler.start()
    assert done.wait(10)
    sampler.stop()
    assert history.last_seq >= 2

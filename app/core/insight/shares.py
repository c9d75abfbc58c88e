"""Queue shares over time: a bounded ring buffer of samples, taken by a background sampler.

Each sample holds, per queue, the fraction of the cluster it uses and the fraction it deserves
(``app.core.policies.drf.deserved``), for GPUs, cpu and memory. The history lives in the server
(not the browser), so a chart of it survives a page reload; it is bounded (oldest samples
dropped first), so a server running for weeks holds a fixed amount. Samples are numbered:
a reader asks for those after the last number it has seen.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.core.model.values import CPU, GPU, MEMORY, Pod
from app.core.policies.drf import deserved
from app.core.state.queueusage import QueueUsage
from app.core.state.view import Snapshot

log = logging.getLogger("muster.shares")

#: The resources a sample follows (the index of each in ``RESOURCE_NAMES`` order).
SAMPLED: tuple[str, ...] = (GPU, CPU, MEMORY)
#: Samples kept by default: one hour at the default interval.
DEFAULT_CAPACITY = 720
#: Seconds between samples by default.
DEFAULT_INTERVAL = 5.0


@dataclass(frozen=True, slots=True)
class QueueShare:
    """One queue in one sample: fractions of the cluster's capacity, per ``SAMPLED`` resource."""

    used: tuple[float, ...]
    deserved: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class ShareSample:
    """The shares of every queue at ``time`` (seconds since the epoch); ``seq`` counts up."""

    seq: int
    time: float
    queues: dict[str, QueueShare]


def pending_pods(snapshot: Snapshot) -> list[Pod]:
    """The pods of ``snapshot`` that hold no node (their asks are queues' pending demand)."""
    return [p for uid, p in snapshot.pods.items() if not snapshot.placement.get(uid)]


def shares_of(usage: QueueUsage) -> dict[str, QueueShare]:
    """Per queue of ``usage.config``: used and deserved fractions of the cluster."""
    capacity = np.asarray(usage.capacity, np.float64)[: len(SAMPLED)]
    safe = np.where(capacity > 0, capacity, 1.0)
    fair = deserved(usage)
    out: dict[str, QueueShare] = {}
    for _, queue in usage.config.walk():
        used = np.asarray(usage.of(queue.name), np.float64)[: len(SAMPLED)] / safe
        due = np.asarray(fair.get(queue.name, np.zeros(4)), np.float64)[: len(SAMPLED)] / safe
        out[queue.name] = QueueShare(
            tuple(round(float(v), 4) for v in used), tuple(round(float(v), 4) for v in due)
        )
    return out


class ShareHistory:
    """The last ``capacity`` samples (thread-safe)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._samples: deque[ShareSample] = deque(maxlen=capacity)
        self._seq = 0

    def record(self, time: float, usage: QueueUsage) -> ShareSample:
        """Add a sample of ``usage`` taken at ``time``; the oldest goes when full."""
        queues = shares_of(usage)
        with self._lock:
            self._seq += 1
            sample = ShareSample(self._seq, time, queues)
            self._samples.append(sample)
            return sample

    @property
    def last_seq(self) -> int:
        """The number of the newest sample (0: none yet)."""
        with self._lock:
            return self._seq

    def since(self, seq: int = 0, limit: int | None = None) -> list[ShareSample]:
        """The samples numbered above ``seq``, oldest first; at most the newest ``limit``."""
        with self._lock:
            out = [s for s in self._samples if s.seq > seq]
        return out[-limit:] if limit is not None and limit < len(out) else out


class ShareSampler:
    """Records ``measure()`` into ``history`` every ``interval`` seconds, in a thread, from
    ``start()`` (which records one sample at once) until ``stop()``."""

    def __init__(
        self,
        history: ShareHistory,
        measure: Callable[[], QueueUsage],
        *,
        interval: float = DEFAULT_INTERVAL,
        wall: Callable[[], float],
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.history = history
        self._measure = measure
        self._interval = interval
        self._wall = wall
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> ShareSample:
        """Record one sample now."""
        return self.history.record(self._wall(), self._measure())

    def start(self) -> None:
        """Record a sample now, then one every interval (idempotent)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="muster-share-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sampling and wait for the thread."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.sample()
            except Exception:  # a bad sample must not end the history; the next may work
                log.exception("sampling queue shares failed")

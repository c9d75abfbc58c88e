"""What pods leaving would free: per node row, their resources and GPU devices (``Releases``),
and a ``NodeView`` as if they were gone (``without``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import chain

import numpy as np

from app.core.gpu.ask import MILLI, GpuOvercommit
from app.core.model.values import RESOURCE_NAMES, Pod, Resources
from app.core.state.view import NodeView, Snapshot


@dataclass(frozen=True, slots=True)
class Releases:
    """What giving back some pods frees, pod by pod in order, so that the first ``k`` of them
    can be taken off a view at numpy speed (``freed``)."""

    #: Per pod: its row and its requests.
    rows: np.ndarray
    requests: np.ndarray
    #: Per GPU device held: row, device, milli; ``device_end[k]``: entries of the first k pods.
    device_rows: np.ndarray
    device_ids: np.ndarray
    device_milli: np.ndarray
    device_end: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def only(self, keep: np.ndarray) -> Releases:
        """These releases restricted to the pods where boolean ``keep`` is set (in order)."""
        counts = np.diff(self.device_end)
        devices = np.repeat(keep, counts)
        end = np.zeros(int(keep.sum()) + 1, dtype=np.intp)
        np.cumsum(counts[keep], out=end[1:])
        return Releases(
            self.rows[keep],
            self.requests[keep],
            self.device_rows[devices],
            self.device_ids[devices],
            self.device_milli[devices],
            end,
        )

    def freed(self, view: NodeView, k: int | None = None) -> NodeView:
        """``view`` with the first ``k`` pods (default: all) gone."""
        k = len(self.rows) if k is None else k
        used = view.used.copy()
        if k:
            used -= _row_sums(self.rows[:k], self.requests[:k], len(used))
        gpu_free = view.gpu_free
        end = int(self.device_end[k])
        if end:
            gpu_free = gpu_free.copy()
            self._give(gpu_free, self.device_rows[:end], end)
        return replace(view, used=used, gpu_free=gpu_free)

    def _give(self, gpu_free: np.ndarray, rows: np.ndarray, end: int) -> None:
        """Add the first ``end`` device entries' milli to ``gpu_free`` (in place), whose rows
        for them are ``rows``; no device may end up with more than a whole GPU free."""
        where = (rows, self.device_ids[:end])
        flat = rows * gpu_free.shape[1] + self.device_ids[:end]
        gpu_free += (
            _row_sums(flat, self.device_milli[:end, None], gpu_free.size)
            .reshape(gpu_free.shape)
            .astype(gpu_free.dtype)
        )
        if (gpu_free[where] > MILLI).any():
            raise GpuOvercommit("releasing pods would leave a device with over 1000 free")

    def freed_rows(self, view: NodeView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``freed(view)`` on the rows these pods are on alone: those rows (ascending), and
        those rows of its ``used`` and ``gpu_free`` (the same sums, so the same values)."""
        rows = np.unique(self.rows)
        used = view.used[rows]
        if len(self.rows):
            used -= _row_sums(np.searchsorted(rows, self.rows), self.requests, len(rows))
        gpu_free = view.gpu_free[rows]
        end = int(self.device_end[-1])
        if end:
            self._give(gpu_free, np.searchsorted(rows, self.device_rows[:end]), end)
        return rows, used, gpu_free

    def row_terms(self, view: NodeView) -> RowTerms:
        """What each of these pods frees on the rows they are on (see ``RowTerms``)."""
        count, rows = len(self.rows), np.unique(self.rows)
        width, devices = self.requests.shape[1], view.gpu_free.shape[1]
        requests = np.zeros((count, len(rows), width), np.int64)
        requests[np.arange(count), np.searchsorted(rows, self.rows)] = self.requests
        milli = np.zeros((count, len(rows), devices), np.int64)
        cells = np.zeros_like(milli)
        end = int(self.device_end[-1])
        if end:
            where = (
                np.repeat(np.arange(count), np.diff(self.device_end)),
                np.searchsorted(rows, self.device_rows[:end]),
                self.device_ids[:end],
            )
            np.add.at(milli, where, self.device_milli[:end])
            np.add.at(cells, where, 1)
        # One matrix (one product per question): requests, then milli, then entries.
        terms = np.concatenate(
            [a.reshape(count, a.shape[1] * a.shape[2]) for a in (requests, milli, cells)], axis=1
        )
        return RowTerms(rows, view.used[rows], view.gpu_free[rows], terms)


@dataclass(frozen=True, slots=True)
class RowTerms:
    """What each pod of a ``Releases`` frees on the rows they are on (``rows``, ascending),
    so that those rows of ``Releases.freed`` for any subset of the pods come from one
    product (``freed``): ``used`` and ``gpu_free`` are those rows of the view; per pod, in
    ``terms``, its requests, the milli it gives back per device and its device entries, on
    those rows (each flattened, one after the other)."""

    rows: np.ndarray
    used: np.ndarray
    gpu_free: np.ndarray
    terms: np.ndarray

    def freed(self, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``Releases.only(keep).freed(view)``'s ``used`` and ``gpu_free`` on ``rows`` (the
        same sums, so the same values; the same check that no device ends up over-free)."""
        used, gpu_free, over = self.freed_many(keep[None, :])
        if over[0]:
            raise GpuOvercommit("releasing pods would leave a device with over 1000 free")
        return used[0], gpu_free[0]

    def freed_many(self, keeps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``freed(keep)`` for each row ``keep`` of ``keeps``: ``used`` and ``gpu_free`` (one
        more leading axis), and per row whether ``freed`` would refuse it (a device over-free)."""
        count, a, b = len(keeps), self.used.size, self.gpu_free.size
        sums = keeps.astype(np.int64) @ self.terms
        used = self.used - sums[:, :a].reshape(count, *self.used.shape)
        given = sums[:, a : a + b].reshape(count, *self.gpu_free.shape)
        gpu_free = self.gpu_free + given.astype(self.gpu_free.dtype)
        touched = sums[:, a + b :].reshape(gpu_free.shape) > 0
        over = ((gpu_free > MILLI) & touched).any(axis=(1, 2))
        return used, gpu_free, over


#: ``_row_sums`` adds values in two parts of at most this many bits each.
_LOW_BITS = 26
#: Below this many values ``np.add.at`` is the quicker.
_FEW = 512


def _row_sums(rows: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    """Per row in ``range(count)``, the exact int64 sum of the ``values`` rows (one column
    each) given for it (rows repeat). ``np.add.at`` does this slowly; ``np.bincount`` fast
    but in float64, which is exact only below 2**53, so each value is split into its low
    ``_LOW_BITS`` bits and the rest, and each part is summed apart (each sum stays exact)."""
    values = np.asarray(values, np.int64)
    if len(rows) < _FEW:
        few = np.zeros((count, values.shape[1]), np.int64)
        np.add.at(few, rows, values)
        return few
    out = np.empty((count, values.shape[1]), np.int64)
    mask = (1 << _LOW_BITS) - 1
    for c in range(values.shape[1]):
        column = values[:, c]
        high = np.bincount(rows, weights=column >> _LOW_BITS, minlength=count)
        low = np.bincount(rows, weights=column & mask, minlength=count)
        out[:, c] = (high.astype(np.int64) << _LOW_BITS) + low.astype(np.int64)
    return out


def releases(snapshot: Snapshot, pods: Iterable[Pod], view: NodeView | None = None) -> Releases:
    """``Releases`` of ``pods`` on ``view`` (default: the snapshot's), in their order; pods
    without a placement there (or seen twice) are skipped."""
    view = snapshot.view if view is None else view
    rows: list[int] = []
    requests: list[Resources] = []
    device_rows: list[int] = []
    device_ids: list[int] = []
    device_milli: list[int] = []
    device_end = [0]
    seen: set[str] = set()
    placement, index, devices = snapshot.placement, view.index, snapshot.devices
    for pod in pods:
        node = placement.get(pod.uid)
        row = index.get(node) if node else None
        if row is None or pod.uid in seen:
            continue
        seen.add(pod.uid)
        rows.append(row)
        requests.append(pod.requests)
        held = devices.get(pod.uid)
        if held is not None and held.node == node:
            for device in held.devices:
                device_rows.append(row)
                device_ids.append(device)
                device_milli.append(held.ask.milli)
        device_end.append(len(device_ids))
    width = len(RESOURCE_NAMES)
    return Releases(
        np.asarray(rows, dtype=np.intp),
        # fromiter over the flat values: several times quicker than asarray on tuples.
        np.fromiter(chain.from_iterable(requests), np.int64, len(requests) * width).reshape(
            -1, width
        ),
        np.asarray(device_rows, dtype=np.intp),
        np.asarray(device_ids, dtype=np.intp),
        np.asarray(device_milli, dtype=np.int64),
        np.asarray(device_end, dtype=np.intp),
    )


def without(snapshot: Snapshot, pods: Iterable[Pod], view: NodeView | None = None) -> NodeView:
    """``view`` (default: the snapshot's) as if ``pods`` were gone: their resources and GPU
    devices free again. Pods without a placement (or seen twice) are skipped."""
    view = snapshot.view if view is None else view
    return releases(snapshot, pods, view).freed(view)

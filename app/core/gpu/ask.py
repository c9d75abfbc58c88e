"""A pod's GPU ask and the rules of per-device GPU accounting.

Data model
----------
* A node's GPUs are devices ``0 .. N-1``; each has a capacity of ``MILLI`` (1000) milli-GPU.
  A node's GPU state is the **free milli-GPU per device** (``free[d]``, at most 1000; below
  0 only where the API reports an over-commit Muster did not make).
* A pod's GPU ask (``GpuAsk``, ``GpuAsk.of(pod)``) is ``count`` devices of ``milli`` each:

  ========================  =========  ==========  ==========================================
  ask                       ``count``  ``milli``   needs
  ========================  =========  ==========  ==========================================
  no GPU                    0          0           nothing
  ``N`` whole GPUs          N >= 1     1000        ``N`` fully free devices
  a share of one GPU        1          1 .. 999    one device with at least ``milli`` free
  ========================  =========  ==========  ==========================================

  plus ``models``: the GPU models the pod accepts (openb's ``gpu_spec`` ``"A|B"``, a pod's
  ``nvidia.com/gpu.product`` node selector or affinity; empty = any).

The rules, each written once here and used by the cache's ``DeviceLedger``
(``app.core.gpu.ledger``), the policies' ``GpuTable`` (``app.core.gpu.table``), the filter,
the planner and the simulator:

* **fits**: ``fits`` for one node's free vector, ``fits_rows`` for many nodes at once (from
  each row's largest free device and count of fully free devices; ``fits_mask`` computes those
  from a ``rows x devices`` matrix). The GPU model is a separate check (``GpuAsk.allows``).
* **usable devices**: ``refusal`` says why given devices cannot take an ask (``usable``: they
  can).
* **accounting**: ``take`` subtracts an ask from its devices, ``give`` adds it back; both
  refuse (``GpuOvercommit``) anything that would take a device below its ask or above 1000
  free, or give a partly used device to a whole-GPU ask.

Which devices an ask gets by default (NVLink and NUMA for whole GPUs, the tightest device for
a share) is ``app.core.gpu.links.choose``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from app.core.model.interned import Interned
from app.core.model.podfacts import PodFact
from app.core.model.values import GPU_PRODUCT_LABEL, Pod

MILLI = 1000
#: Bytes per MiB times the milli factor of ``Resources.memory``.
MIB_MILLI = 2**20 * 1000


class GpuOvercommit(AssertionError):
    """An allocation or release would break a device's 0..1000 bounds: a bug in the caller."""


def parse_gpu_spec(spec: str | None) -> frozenset[str]:
    """Allowed GPU models from openb's ``gpu_spec`` (``"A|B"``; empty or None = any)."""
    return frozenset(m.strip() for m in (spec or "").split("|") if m.strip())


def gpu_models(pod: Pod) -> frozenset[str]:
    """The GPU models the pod's ``nodeSelector`` and required node affinity allow on
    ``nvidia.com/gpu.product`` (empty: any).

    Affinity counts when every term has an ``In`` on the label (the union of their values).
    The filter enforces both itself; this only tells the policies which class of work the
    pod belongs to.
    """
    allowed: set[str] | None = None
    terms = pod.required_affinity or ()
    for term in terms:
        found = [
            r.values
            for r in term.match_expressions
            if r.key == GPU_PRODUCT_LABEL and r.operator == "In"
        ]
        if not found:
            allowed = None
            break
        allowed = (allowed or set()) | set(found[0])
    chosen = pod.node_selector.get(GPU_PRODUCT_LABEL)
    if chosen:
        allowed = {chosen} if allowed is None else allowed & {chosen}
    return frozenset(allowed or ())


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """What a pod asks of one node's GPUs (see the module docstring for the three shapes)."""

    count: int = 0
    milli: int = 0
    models: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.count < 0 or (self.count == 0) != (self.milli == 0):
            raise ValueError(f"bad GPU ask: count={self.count} milli={self.milli}")
        if self.count and not 0 < self.milli <= MILLI:
            raise ValueError(f"bad GPU share: {self.milli} milli (1..{MILLI})")
        if self.count > 1 and self.milli != MILLI:
            raise ValueError("a multi-GPU ask takes whole devices")

    @classmethod
    def of(cls, pod: Pod) -> GpuAsk:
        """The ask of a pod: a share of one GPU if it has ``gpu_fraction``, else its whole
        ``nvidia.com/gpu`` request; models from ``gpu_models`` (GPU pods only).

        Remembered per pod object (pods are immutable; a cycle asks for each member several
        times: placing it, reserving it, committing it)."""
        return _ASKS.of(pod)

    @classmethod
    def of_each(cls, pods: Iterable[Pod]) -> list[GpuAsk]:
        """``of`` of each of ``pods`` (the memo read in line: a commit asks for every pod)."""
        return _ASKS.of_each(pods)

    @classmethod
    def _of(cls, pod: Pod) -> GpuAsk:
        if pod.gpu_fraction:
            return cls(1, pod.gpu_fraction, gpu_models(pod))
        whole = pod.requests.gpu // MILLI
        return cls(whole, MILLI, gpu_models(pod)) if whole else NO_GPU

    @classmethod
    def whole(cls, count: int, models: Iterable[str] = ()) -> GpuAsk:
        """``count`` whole GPUs (0 = none)."""
        return cls(count, MILLI if count else 0, frozenset(models))

    @classmethod
    def fraction(cls, milli: int, models: Iterable[str] = ()) -> GpuAsk:
        """A share of one GPU, in milli-GPU (1000 = one whole GPU)."""
        return cls(1, milli, frozenset(models))

    @classmethod
    def from_openb(cls, num_gpu: int, gpu_milli: int, gpu_spec: str | None = "") -> GpuAsk:
        """The ask of an openb pod row (``num_gpu``, ``gpu_milli``, ``gpu_spec``)."""
        models = parse_gpu_spec(gpu_spec)
        return cls(num_gpu, gpu_milli if num_gpu else 0, models)

    @property
    def shared(self) -> bool:
        """Whether this is a share of one device rather than whole devices."""
        return self.count == 1 and self.milli < MILLI

    @property
    def total(self) -> int:
        """Milli-GPU the ask takes in all."""
        return self.count * self.milli

    def allows(self, model: str) -> bool:
        """Whether a node whose GPUs are ``model`` is acceptable (always, without GPUs)."""
        return not self.count or not self.models or model in self.models


NO_GPU = GpuAsk()


def asks_known() -> Callable[[str], tuple[Pod, GpuAsk] | None]:
    """``GpuAsk.of``'s memo lookup by pod uid, to read it in line in a loop over many pods: a
    hit ``(pod, ask)`` answers for that very pod only (``hit[0] is pod``)."""
    return _ASKS.lookup()


#: Every distinct ask ``GpuAsk.of`` made, one object per value (comparing them is quick).
_SAME: Interned[GpuAsk] = Interned(16384)


def _shared_ask(pod: Pod) -> GpuAsk:
    return _SAME(GpuAsk._of(pod))


#: ``GpuAsk.of``, remembered per pod object.
_ASKS: PodFact[GpuAsk] = PodFact(_shared_ask, ahead=True)


@dataclass(frozen=True, slots=True)
class PodAsk:
    """A pod's GPU ask with the cpu (milli) and memory it needs on the same node: what the
    vectorised policies place.

    Memory is in whatever unit the ``GpuTable`` uses (MiB for openb and the live table).
    """

    gpu: GpuAsk = NO_GPU
    cpu: int = 0
    memory: int = 0

    @classmethod
    def of(cls, pod: Pod) -> PodAsk:
        """A pod's ask: ``GpuAsk.of(pod)``, cpu (milli) and memory (MiB)."""
        return cls(GpuAsk.of(pod), pod.requests.cpu, pod.requests.memory // MIB_MILLI)


# -- the fits rule ---------------------------------------------------------------------------


def fits(free: Sequence[int] | np.ndarray, ask: GpuAsk) -> bool:
    """Whether devices with ``free`` milli each have room for ``ask`` (the GPU model aside):
    a share needs one device with ``milli`` free, whole GPUs ``count`` fully free devices."""
    if ask.count == 0:
        return True
    if ask.shared:
        return any(f >= ask.milli for f in free)
    return sum(1 for f in free if f == MILLI) >= ask.count


def fits_rows(largest: np.ndarray, idle: np.ndarray, ask: GpuAsk) -> np.ndarray:
    """``fits`` for many nodes at once, from each row's ``largest`` free device (milli) and
    count of ``idle`` (fully free) devices."""
    if ask.count == 0:
        return np.ones(len(largest), dtype=bool)
    if ask.shared:
        return np.asarray(largest >= ask.milli)
    return np.asarray(idle >= ask.count)


def fits_mask(free: np.ndarray, ask: GpuAsk) -> np.ndarray:
    """``fits`` per row of ``free`` (rows x devices, free milli; absent devices 0)."""
    if ask.count == 0:
        return np.ones(len(free), dtype=bool)
    return fits_rows(free.max(axis=1, initial=0), (free == MILLI).sum(axis=1), ask)


# -- taking and giving devices ---------------------------------------------------------------


def _misnamed(free: Sequence[int] | np.ndarray, ask: GpuAsk, devices: Sequence[int]) -> str | None:
    n = len(devices)
    if n != ask.count or len(set(devices)) != n:
        return f"{ask} needs {ask.count} distinct devices, got {tuple(devices)}"
    if n and (min(devices) < 0 or max(devices) >= len(free)):
        return f"no such device in {tuple(devices)} (node has {len(free)})"
    return None


def refusal(free: Sequence[int] | np.ndarray, ask: GpuAsk, devices: Sequence[int]) -> str | None:
    """Why ``devices`` cannot take ``ask`` given per-device ``free`` milli (None: they can).

    They must be ``count`` distinct existing devices, each with ``milli`` free for a share,
    each fully free for whole GPUs.
    """
    why = _misnamed(free, ask, devices)
    if why is not None:
        return why
    shared = ask.shared
    for d in devices:
        if shared and free[d] < ask.milli:
            return f"device {d} has {free[d]} milli free, {ask.milli} asked"
        if not shared and free[d] != MILLI:
            return f"device {d} is partly used ({free[d]} free): not whole"
    return None


def usable(free: Sequence[int] | np.ndarray, ask: GpuAsk, devices: Sequence[int]) -> bool:
    """Whether ``devices`` can take ``ask`` (see ``refusal``)."""
    return refusal(free, ask, devices) is None


def take(free: np.ndarray, ask: GpuAsk, devices: Sequence[int], *, reported: bool = False) -> None:
    """Subtract ``ask`` from ``devices`` of ``free`` in place; ``GpuOvercommit`` if they
    cannot take it (nothing changes then).

    ``reported``: record it even without room (what the API reports, e.g. a pod bound by
    another scheduler); the devices must still be ``count`` distinct existing ones.
    """
    if not reported and len(devices) == 1 == ask.count:  # the usual case, checked plainly
        d = devices[0]
        if 0 <= d < len(free):
            have = int(free[d])
            if (have >= ask.milli) if ask.milli < MILLI else (have == MILLI):
                free[d] = have - ask.milli
                return
    why = _misnamed(free, ask, devices) if reported else refusal(free, ask, devices)
    if why is not None:
        raise GpuOvercommit(why)
    for d in devices:
        free[d] -= ask.milli


def give(free: np.ndarray, ask: GpuAsk, devices: Sequence[int]) -> None:
    """Add ``ask`` back to ``devices`` of ``free`` in place (an earlier ``take`` undone);
    ``GpuOvercommit`` if a device would have more than 1000 free (nothing changes then)."""
    why = _misnamed(free, ask, devices)
    if why is not None:
        raise GpuOvercommit(why)
    for d in devices:
        if free[d] + ask.milli > MILLI:
            raise GpuOvercommit(f"device {d} would have {free[d] + ask.milli} milli free")
    for d in devices:
        free[d] += ask.milli

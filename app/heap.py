"""The process's heap, once the cluster cache holds the whole cluster."""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("muster")


def freeze_heap() -> None:
    """Leave every object alive now out of future full garbage collections, which otherwise
    stall every thread for tens of milliseconds (up to ~100) as the heap grows. Objects frozen
    and later dropped are still freed unless they form reference cycles (pods do not)."""
    gc.collect()
    gc.freeze()
    log.info("heap frozen: %d objects", gc.get_freeze_count())

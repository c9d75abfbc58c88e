"""The queue configuration in force, loaded from a file and reloaded when it changes.

A file that does not validate is refused with the reason logged and kept in ``error``; the
previous configuration stays in force. Without a file, everything runs in one open queue.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from app.core.model.errors import InvalidInput
from app.core.model.queues import OPEN, QueueConfig, parse_queue_config

log = logging.getLogger("muster.queues")


class QueueFile:
    """Holds the current ``QueueConfig``; ``refresh()`` reloads it if the file changed."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._config: QueueConfig = OPEN
        self._stamp: tuple[int, int] | None = None
        self.error = ""
        self.loads = 0
        if path is not None:
            self.refresh()
            if self.error:
                raise InvalidInput(str(path), self.error)

    @property
    def config(self) -> QueueConfig:
        """The configuration in force."""
        return self._config

    def refresh(self) -> bool:
        """Reload if the file's size or mtime changed; returns whether a new config is in force."""
        if self.path is None:
            return False
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return False
            text = self.path.read_text()
        except OSError as exc:
            return self._refuse(stamp=None, why=f"cannot read: {exc.strerror}")
        try:
            config = parse_queue_config(text)
        except InvalidInput as exc:
            return self._refuse(stamp, str(exc))
        with self._lock:
            self._config, self._stamp, self.error = config, stamp, ""
            self.loads += 1
        log.info("queue configuration %s loaded: %d queues", self.path, len(config.queues))
        return True

    def _refuse(self, stamp: tuple[int, int] | None, why: str) -> bool:
        with self._lock:
            if stamp is not None:
                self._stamp = stamp  # do not re-parse the same bad file every second
            changed = why != self.error
            self.error = why
        if changed:
            log.error(
                "queue configuration %s refused (keeping the previous one): %s", self.path, why
            )
        return False

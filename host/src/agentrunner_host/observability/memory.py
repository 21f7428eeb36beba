"""Process memory policy of the host: memory that large messages used goes back to the system.

After a burst of 16 MiB inputs the host stayed far above its usual size, for good, for three reasons:
objects of the burst's runs left in reference cycles (a failed run's exception holds its frames, and
they its request) wait for a full collection, which the young-generation collections rarely trigger;
gRPC receives a large message as many small buffers, and glibc keeps what they freed in its arenas
(each thread its own); and glibc raises its mmap threshold each time a large block is freed, so later
large blocks come from the arenas too. So: large blocks are always mmapped, and after large messages
went through, a trimmer runs a full collection and returns the arenas' free memory (`malloc_trim`)
while the burst winds down.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
from typing import Any

import structlog

log = structlog.get_logger("agentrunner_host.observability.memory")

#: glibc `mallopt` parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: blocks from this size up are mmapped (and unmapped when freed)
MMAP_THRESHOLD_BYTES = 1024 * 1024
#: a message at least this large makes the trimmer run once traffic has calmed down
LARGE_MESSAGE_BYTES = 1024 * 1024
#: after large messages, the trimmer runs this often while none arrives ...
TRIM_INTERVAL_SECONDS = 2.0
#: ... until this long has passed since the last one
TRIM_FOR_SECONDS = 30.0


def _libc() -> Any | None:
    if os.environ.get("AGENTRUNNER_NO_MALLOC_TUNING"):  # (to measure the difference)
        return None
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018 - glibc only
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def resident_bytes() -> int:
    """This process's resident set size (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class MemoryTrimmer:
    """`note(size)` for each large message; `run()` (a task) trims once a burst is over."""

    def __init__(self) -> None:
        self._libc = _libc()
        self._large = 0
        self._wake: asyncio.Event | None = None
        if self._libc is not None:
            ok = self._libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and self._libc.mallopt(
                _M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_BYTES
            )
            if not ok:
                log.warning("memory.mallopt_refused")

    @property
    def active(self) -> bool:
        return self._libc is not None

    def note(self, size: int) -> None:
        """A message of `size` bytes went through (cheap: called from deserializers)."""
        if size >= LARGE_MESSAGE_BYTES and self._libc is not None:
            self._large += 1
            if self._wake is not None:
                self._wake.set()

    def trim(self) -> None:
        if self._libc is None:
            return
        before = resident_bytes()
        self._libc.malloc_trim(0)
        after = resident_bytes()
        if before - after >= LARGE_MESSAGE_BYTES:
            log.info("memory.trimmed", resident_mb=after >> 20, returned_mb=(before - after) >> 20)

    async def run(self) -> None:
        """After large messages: trims every `TRIM_INTERVAL_SECONDS` in which none arrived, until
        `TRIM_FOR_SECONDS` passed without one (what a burst's runs hold is freed when they end, which
        can be well after their last large message)."""
        if self._libc is None:
            return
        loop = asyncio.get_running_loop()
        self._wake = wake = asyncio.Event()
        if self._large:
            wake.set()
        while True:
            await wake.wait()
            wake.clear()
            seen, last_large = self._large, loop.time()
            while loop.time() - last_large < TRIM_FOR_SECONDS:
                await asyncio.sleep(TRIM_INTERVAL_SECONDS)
                if self._large != seen:  # still arriving: trim once they pause
                    seen, last_large = self._large, loop.time()
                    continue
                # what the burst left in reference cycles (a failed run's exception holds its frames,
                # and they its request) is freed by a full collection, not by the young generations
                gc.collect()
                await asyncio.to_thread(self.trim)
            self._large = 0


#: the process's trimmer (deserializers note large messages here)
TRIMMER: MemoryTrimmer | None = None


def trimmer() -> MemoryTrimmer:
    global TRIMMER
    if TRIMMER is None:
        TRIMMER = MemoryTrimmer()
    return TRIMMER


def note_message(size: int) -> None:
    if TRIMMER is not None and size >= LARGE_MESSAGE_BYTES:
        TRIMMER.note(size)

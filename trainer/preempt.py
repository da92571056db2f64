"""SIGTERM, a scheduler's preemption signal, as a request to stop at the next safe point.

    with sigterm_stops():            # agentgym-train: in the main thread, around the run
        ...                          # the trainer asks stop_requested() after each step

The handler only sets a flag: a checkpoint written from inside a signal handler could
interrupt another write. The trainer checks the flag after every PPO and warm-start step
(and before the first), writes a checkpoint there and raises
:class:`~agentgym.errors.Preempted`; ``agentgym-train`` then exits with 143 (128 + SIGTERM)
and prints the ``--resume`` command. A second SIGTERM ends the process at once (the default
action), for a scheduler that does not wait. Under torchrun the ranks agree (one rank's flag
stops them all at the same step), so no rank waits in a collective the others left.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .distributed import all_gather_objects

__all__ = ["sigterm_stops", "stop_requested"]

_requested = threading.Event()


def _on_sigterm(signum: int, frame: Any) -> None:
    _requested.set()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM: the default, immediate end
    print("agentgym-train: SIGTERM received; stopping after the current step with a checkpoint "
          "(send it again to stop at once)", file=sys.stderr, flush=True)


@contextmanager
def sigterm_stops() -> Iterator[None]:
    """Turn SIGTERM into :func:`stop_requested` inside the block (main thread only; elsewhere
    signals cannot be handled and the block runs unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested.clear()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        _requested.clear()


def stop_requested(world: int = 1) -> bool:
    """Whether SIGTERM asked this run to stop. With ``world > 1`` every rank must call it at the
    same point: the ranks' flags are gathered, and any one stops all."""
    asked = _requested.is_set()
    if world <= 1:
        return asked
    return any(all_gather_objects(asked))

"""Hub scoring out of agentgym's process: no text from a policy is evaluated by the host.

Several hubs' scorers evaluate the answer they score (reasoning-gym's ``eval(answer)`` and sympy's
``parse_expr(answer)``; a SkyRL or verifiers reward is whatever code the env ships). agentgym
never calls them in its own process. An :class:`IsolatedScorer` starts one worker process per env
(:mod:`.scorer_worker`, lazily, restarted when it dies) that builds the hub's scorer once and
then forks a **fresh child for every session** (one answer, or one SkyRL episode): the child
drops to ``nobody`` when agentgym runs as root, gets a fresh empty working directory, memory, CPU
and file-size limits and an audit hook that refuses writes, processes and sockets, and is killed
after its call or at the time limit. Whatever an answer does inside its child (patch the scorer,
leave a thread, fill memory) dies with that child: the next answer gets a clean fork of a template
that never saw answer text.

What it does not do: it is not a container (the child reads what the user can read; a determined
escape from the audit hook, e.g. through a bug in CPython, lands in a process running as
``nobody`` or, when agentgym does not run as root, as the user with ``RLIMIT_FSIZE`` 0); and code
running in the child can choose *that* call's verdict. Where a scorer is known to evaluate its
input, agentgym therefore also gates the answer first (:mod:`.answer_rules`): only a plain literal
or a plain math expression reaches it.

Verdicts: a session that raises, times out or dies scores 0 (the answer's doing); a worker that
cannot start or stops answering is a :class:`ScorerFault` (an infrastructure fault, the episode is
void).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

from agentgym.errors import InfraError

__all__ = ["IsolatedScorer", "ScorerFault", "SessionError", "shared_scorer", "release_scorer"]

WORKER = "agentgym.environments.interop.scorer_worker"


class ScorerFault(InfraError):
    """The scorer worker could not start or stopped answering: an infrastructure fault."""


class SessionError(Exception):
    """A session's call raised, timed out or died: the answer earns 0 (the message says why)."""


class IsolatedScorer:
    """A hub scorer in a worker process (see the module docstring).

    ``factory`` is ``"module:function"``, called once in the worker with ``args`` (JSON); it returns
    an object whose ``open(session_args)`` gives the session callable. ``timeout`` bounds each call
    (seconds), ``memory_mb`` what a child may allocate above the template's size.
    """

    def __init__(self, factory: str, args: dict[str, Any], *, timeout: float = 20.0, memory_mb: int = 1024,
                 start_timeout: float = 180.0) -> None:
        self.factory, self.args = factory, args
        self.timeout, self.start_timeout = float(timeout), float(start_timeout)
        self.limits = {"memory_mb": int(memory_mb), "cpu_s": max(1, int(timeout) + 1)}
        self.proc: subprocess.Popen[bytes] | None = None
        self.sessions = 0  # children forked so far (one per session)
        self.lock = threading.RLock()  # one session at a time (envs in threads may share a worker)

    # ------------------------------------------------------------------ sessions
    def score(self, open_args: Any, calls: list[Any]) -> list[Any]:
        """Open one fresh session with ``open_args``, make ``calls`` in it, close it. A call that
        fails raises :class:`SessionError`."""
        with self.lock:
            self.open(open_args)
            try:
                return [self.call(c) for c in calls]
            finally:
                self.close_session()

    def score_each(self, open_args: Any, calls: list[Any], failed: Any = None) -> list[Any]:
        """Like :meth:`score`, with ``failed`` in place of each call that raised, timed out or died."""
        out: list[Any] = []
        with self.lock:
            try:
                self.open(open_args)
            except SessionError:
                return [failed] * len(calls)
            try:
                for c in calls:
                    try:
                        out.append(self.call(c))
                    except SessionError:
                        out.append(failed)
            finally:
                self.close_session()
        return out

    def open(self, open_args: Any) -> None:
        reply = self._request({"op": "open", "args": open_args}, self.start_timeout)
        self.sessions += 1
        if "error" in reply:
            self.close_session()
            raise SessionError(f"the scorer session did not open: {reply['error']}")

    def call(self, args: Any) -> Any:
        reply = self._request({"op": "call", "args": args, "timeout": self.timeout}, self.timeout + 30.0)
        if "error" in reply:
            raise SessionError(str(reply["error"]))
        return reply.get("result")

    def close_session(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._request({"op": "close"}, 30.0)

    def close(self) -> None:
        """Stop the worker (idempotent)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        for f in (proc.stdout, proc.stdin):
            if f is not None:
                f.close()

    # ------------------------------------------------------------------ the worker
    def _start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.Popen([sys.executable, "-m", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        self.proc = proc
        reply = self._exchange({"factory": self.factory, "args": self.args, "limits": self.limits},
                               self.start_timeout)
        if reply is None or not reply.get("ready"):
            self.close()
            why = "no answer" if reply is None else reply.get("error")
            raise ScorerFault(f"the scorer worker for {self.factory} did not start within "
                              f"{self.start_timeout:g} s: {why}")
        return proc

    def _request(self, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = None
            self._start()
        reply = self._exchange(req, timeout)
        if reply is None:  # the worker itself died or hung: restart on the next request
            self.close()
            raise ScorerFault(f"the scorer worker for {self.factory} stopped answering")
        return reply

    def _exchange(self, req: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps(req) + "\n").encode())
            proc.stdin.flush()
        except OSError:
            return None
        fd, buf = proc.stdout.fileno(), b""
        deadline = time.monotonic() + timeout
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            buf += chunk
        try:
            reply = json.loads(buf)
        except ValueError:
            return None
        return reply if isinstance(reply, dict) else None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


# (factory, args as JSON) -> [scorer, number of envs holding it]: envs of one dataset and config
# share one worker (sessions are fresh forks either way, so sharing carries no state).
_SHARED: dict[tuple[str, str], list[Any]] = {}
_SHARED_LOCK = threading.Lock()


def shared_scorer(factory: str, args: dict[str, Any], **kwargs: Any) -> IsolatedScorer:
    """The process-wide worker of ``factory(**args)`` (started on first use); give it back with
    :func:`release_scorer`."""
    key = (factory, json.dumps([args, kwargs], sort_keys=True, default=str))
    with _SHARED_LOCK:
        held = _SHARED.get(key)
        if held is None:
            held = _SHARED[key] = [IsolatedScorer(factory, args, **kwargs), 0]
        held[1] += 1
        return held[0]  # type: ignore[no-any-return]


def release_scorer(scorer: IsolatedScorer) -> None:
    """One env lets go of a shared worker; the last one stops it."""
    with _SHARED_LOCK:
        for key, held in list(_SHARED.items()):
            if held[0] is scorer:
                held[1] -= 1
                if held[1] <= 0:
                    del _SHARED[key]
                    scorer.close()
                return
    scorer.close()

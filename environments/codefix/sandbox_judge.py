"""The hidden-test judge, run *inside the sandbox*: trusted tests against untrusted code.

Not imported by agentgym: :mod:`.judge` reads this file as text and the sandbox runs it as
``python3 -I -S -c SOURCE`` (stdlib only; nothing of it on the sandbox's disk), with the spec
(:func:`~.judge.judge_payload`: nonce, tests, timeouts, the child's source) on stdin. It
runs each test unit in its own namespace's ``exec``, calling the candidate through
:class:`Child`, a proxy to a separate process (``sandbox_candidate.py``), and prints exactly
one line, ``@@agentgym-judge NONCE {"total", "passed", "failures"}``. Why each step is
built this way is in :mod:`.judge`'s docstring.
"""

from __future__ import annotations

import ctypes
import json
import os
import pickle
import select
import signal
import subprocess
import sys
import time
from typing import Any

MAX_REPLY = 16 << 20


class CandidateError(Exception):
    pass


class Opaque:
    """A result the child could not encode as a plain value: equal to nothing."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"<{self.text}>"

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


def dec(x: Any) -> Any:
    """The child's tagged JSON (``sandbox_candidate.enc``) -> plain values; anything else is refused."""
    if isinstance(x, list):
        return [dec(v) for v in x]
    if isinstance(x, dict):
        (k, v), = x.items()
        if k == "t":
            return tuple(dec(i) for i in v)
        if k == "s":
            return set(dec(i) for i in v)
        if k == "f":
            return frozenset(dec(i) for i in v)
        if k == "d":
            return {dec(a): dec(b) for a, b in v}
        if k == "b":
            return v.encode("latin-1")
        if k == "c":
            return complex(v[0], v[1])
        if k == "F":
            return float(v)
        if k == "o":
            return Opaque(str(v))
        raise ValueError(f"bad tag {k!r}")
    if x is None or type(x) in (bool, int, float, str):
        return x
    raise ValueError("bad value")


class Child:
    """The candidate's process, called like the candidate's function (restarted after a kill)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.call_t: float = spec["call_timeout"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.fatal: str | None = None
        self.w = self.r = -1

    def start(self) -> None:
        spec = self.spec
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", spec["child"], str(req_r), str(rep_w), spec["path"],
             spec["entry_point"]],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(req_r, rep_w), start_new_session=True)
        os.close(req_r)
        os.close(rep_w)
        self.w, self.r = req_w, rep_r
        os.set_blocking(self.w, False)
        try:
            hello = self.read(self.call_t + spec["import_timeout"])
        except BaseException as e:
            hello = {"error": f"importing {spec['path']} failed: {type(e).__name__}: {e}"}
        if "error" in hello:
            self.fatal = str(hello["error"])
            self.kill()
            raise CandidateError(self.fatal)

    def kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
            for fd in (self.w, self.r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.proc = None

    def read_exact(self, n: int, end: float) -> bytes:
        buf = b""
        while len(buf) < n:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise TimeoutError("candidate timed out")
            chunk = os.read(self.r, n - len(buf))
            if not chunk:
                raise CandidateError("candidate process died")
            buf += chunk
        return buf

    def read(self, timeout: float) -> Any:
        end = time.monotonic() + timeout
        n = int.from_bytes(self.read_exact(8, end), "big")
        if n > MAX_REPLY:
            raise CandidateError("reply too large")
        return json.loads(self.read_exact(n, end).decode())

    def write(self, data: bytes, end: float) -> None:
        view = memoryview(data)
        while view:
            left = end - time.monotonic()
            if left <= 0 or not select.select([], [self.w], [], left)[1]:
                raise TimeoutError("candidate does not read its input")
            view = view[os.write(self.w, view):]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fatal:
            raise CandidateError(self.fatal)
        if self.proc is None:
            self.start()
        data = pickle.dumps((args, kwargs))
        try:
            self.write(len(data).to_bytes(8, "big") + data, time.monotonic() + self.call_t)
            reply = self.read(self.call_t)
        except BaseException:
            self.kill()
            raise
        if "error" in reply:
            raise CandidateError(reply["error"])
        return dec(reply["value"])


class UnitTimeout(BaseException):
    pass


def on_alarm(signum: int, frame: Any) -> None:
    raise UnitTimeout("test unit timed out")


def main() -> None:
    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0: no /proc/PID/mem, no ptrace
    except Exception:
        pass
    spec = json.loads(sys.stdin.buffer.read().decode())
    nonce, unit_t = spec["nonce"], spec["unit_timeout"]
    deadline = time.monotonic() + spec["deadline"]
    signal.signal(signal.SIGALRM, on_alarm)
    ns: dict[str, Any] = {"__name__": "__judge__"}
    exec(compile(spec["support"], "<problem>", "exec"), ns)
    exec(compile(spec["preamble"], "<tests>", "exec"), ns)
    child = Child(spec)
    ns["candidate"] = child
    failures = []
    for i, unit in enumerate(spec["units"]):
        if time.monotonic() > deadline:
            failures.append([i, "deadline: judge ran out of time"])
            continue
        signal.setitimer(signal.ITIMER_REAL, unit_t)
        try:
            exec(compile(unit, f"<test {i}>", "exec"), ns)
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if isinstance(e, UnitTimeout):
                child.kill()
            failures.append([i, f"{type(e).__name__}: {e}"[:300]])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    child.kill()
    n = len(spec["units"])
    result = json.dumps({"total": n, "passed": n - len(failures), "failures": failures})
    sys.stdout.write(f"@@agentgym-judge {nonce} {result}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

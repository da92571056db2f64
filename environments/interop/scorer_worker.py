"""The scorer worker: runs a hub's scoring code out of agentgym's process, one fresh child per session.

Started by :class:`.isolation.IsolatedScorer` as ``python -m agentgym.environments.interop.scorer_worker``.
Protocol: JSON lines on stdin/stdout (the worker's own prints go to stderr).

* First line ``{"factory": "module:function", "args": {...}, "limits": {...}}``: the worker imports
  the factory and calls it once (``factory(**args)``: load the dataset, import the scorer's modules,
  warm lazy imports). This is the *template*: it never sees answer text. Reply ``{"ready": true}``.
* ``{"op": "open", "args": {...}}``: fork a child from the template; the child hardens itself
  (below), then builds a session with ``template.open(args)`` (a callable). Reply ``{"ok": true}``.
* ``{"op": "call", "args": ..., "timeout": s}``: the child answers ``session(args)`` (JSON). A child
  that does not answer within ``timeout`` is killed (``{"error": "timeout"}``); one that dies says
  how (``{"error": "died ..."}``); a call that raises gives ``{"error": "raised ..."}``.
* ``{"op": "close"}``: the child is killed (with its process group) and reaped.

A child, between fork and the first byte of answer text: its own session and process group; a
fresh empty working directory; ``RLIMIT_AS`` (the template's size plus ``memory_mb``), ``RLIMIT_CPU``,
``RLIMIT_FSIZE`` 0 (no file can grow), ``RLIMIT_CORE`` 0, ``RLIMIT_NOFILE``; when the worker runs as
root, uid/gid ``nobody`` with no supplementary groups (no write access to what root owns); and an
audit hook that refuses what a scorer never needs: opening a file for writing, creating or removing
files, starting processes or threads of execution (``os.system``, ``subprocess``, ``exec*``,
``fork``), signals, ``ctypes``, and sockets other than a local pair (an asyncio event loop's
self-pipe; ``connect`` and ``bind`` are refused for every socket). The hook is a tripwire, not a sandbox: code running in the
child can still compute what it likes and answer what it likes for *its own* call. That is why the
child is fresh per session: nothing it does reaches the template, agentgym, or a later answer.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

NOBODY = 65534
# Audit events a scorer never needs (prefix match). "open" is checked by its flags below.
BLOCKED = ("os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty", "subprocess.",
           "os.kill", "os.killpg", "os.remove", "os.unlink", "os.rename", "os.replace", "os.rmdir", "os.mkdir",
           "os.chmod", "os.chown", "os.truncate", "os.symlink", "os.link", "os.utime", "os.putenv",
           "os.unsetenv", "os.chdir", "os.chroot", "os.setxattr", "os.removexattr", "shutil.", "socket.",
           "ctypes.", "pty.", "webbrowser.", "urllib.", "http.", "ftplib.", "smtplib.", "imaplib.", "poplib.",
           "telnetlib.", "sys.addaudithook", "sys.setprofile", "sys.settrace", "_thread.start_new_thread",
           "mmap.", "fcntl.", "resource.setrlimit", "resource.prlimit")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Refused(PermissionError):
    """What the audit hook raises in a scorer child."""


def _guard(event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        mode, flags = (args[1], args[2]) if len(args) >= 3 else (None, 0)
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITE_FLAGS):
            raise Refused(f"agentgym scorer child: no file may be opened for writing ({args[0]!r})")
    elif event == "socket.__new__":  # an event loop's self-pipe (a local socket pair) only
        if len(args) < 2 or args[1] != socket.AF_UNIX:
            raise Refused("agentgym scorer child: no network sockets")
    elif event.startswith(BLOCKED):
        raise Refused(f"agentgym scorer child: {event} is not allowed")


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _reachable_by_others(path: str) -> bool:
    """Can another user (``nobody``) reach ``path``: every folder on the way world-searchable? A
    checkout in a private folder (``mktemp -d`` is 0700) is not: the child then keeps root's uid
    (the audit hook and the limits still hold) rather than fail every import it makes later."""
    import stat

    p = os.path.realpath(path)
    while True:
        try:
            if not os.stat(p).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        parent = os.path.dirname(p)
        if parent == p:
            return True
        p = parent


def harden(workdir: str, limits: dict[str, Any]) -> None:
    """Called in the child right after fork, before any answer text is read."""
    os.setsid()
    os.chdir(workdir)
    mem = _vm_bytes() + int(limits.get("memory_mb", 1024)) * 2**20
    cpu = int(limits.get("cpu_s", 20))
    for lim, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, 0),
                       (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, 64)):
        resource.setrlimit(lim, (value, value))
    if os.getuid() == 0 and _reachable_by_others(sys.prefix) and _reachable_by_others(os.path.dirname(__file__)):
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    sys.addaudithook(_guard)


def _send(fd: int, obj: Any) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _read_line(fd: int, timeout: float | None) -> bytes | None:
    """One line from ``fd`` within ``timeout`` seconds (None: EOF or timeout)."""
    import time

    buf = b""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not buf.endswith(b"\n"):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        buf += chunk
    return buf


def _child(template: Any, open_args: Any, rfd: int, wfd: int, workdir: str, limits: dict[str, Any]) -> None:
    try:
        harden(workdir, limits)
        session: Callable[[Any], Any] = template.open(open_args)
        _send(wfd, {"ok": True})
        while True:
            line = _read_line(rfd, None)
            if line is None:
                break
            try:
                out = {"result": session(json.loads(line))}
            except BaseException as e:  # the scorer's failure on this answer, reported, never trusted
                out = {"error": f"raised {type(e).__name__}: {str(e)[:300]}"}
            _send(wfd, out)
    except BaseException as e:
        try:
            _send(wfd, {"error": f"raised {type(e).__name__}: {str(e)[:300]}"})
        except BaseException:
            pass
    finally:
        os._exit(0)


class Template:
    """The worker's parent side: the built factory, and at most one live child."""

    def __init__(self, factory: Any, limits: dict[str, Any]) -> None:
        self.factory, self.limits = factory, limits
        self.pid: int | None = None
        self.rfd = self.wfd = -1
        self.workdir: str | None = None

    def open(self, args: Any) -> dict[str, Any]:
        self.close()
        self.workdir = tempfile.mkdtemp(prefix="agentgym-scorer-")
        os.chmod(self.workdir, 0o755)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(to_child_w)
            os.close(from_child_r)
            os.close(0)
            _child(self.factory, args, to_child_r, from_child_w, self.workdir, self.limits)
        os.close(to_child_r)
        os.close(from_child_w)
        self.pid, self.wfd, self.rfd = pid, to_child_w, from_child_r
        return self._reply(float(self.limits.get("open_timeout_s", 60)))

    def call(self, args: Any, timeout: float) -> dict[str, Any]:
        if self.pid is None:
            return {"error": "no session open"}
        try:
            _send(self.wfd, args)
        except OSError:
            return self._dead()
        return self._reply(timeout)

    def _reply(self, timeout: float) -> dict[str, Any]:
        line = _read_line(self.rfd, timeout)
        if line is None:
            alive = self.pid is not None and os.waitpid(self.pid, os.WNOHANG) == (0, 0)
            if alive:
                self.close()
                return {"error": f"timeout: no verdict within {timeout:g} s"}
            return self._dead()
        try:
            reply = json.loads(line)
        except ValueError:
            reply = {"error": "the child answered something that is not JSON"}
        return reply if isinstance(reply, dict) else {"error": "the child answered a non-object"}

    def _dead(self) -> dict[str, Any]:
        self.close()
        return {"error": "died before answering"}

    def close(self) -> None:
        if self.pid is not None:
            for target in (lambda s: os.killpg(self.pid, s), lambda s: os.kill(self.pid, s)):  # type: ignore[arg-type]
                try:
                    target(signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            for fd in (self.rfd, self.wfd):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.pid = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def main() -> None:
    out = os.dup(1)
    os.dup2(2, 1)  # the scorers' prints go to stderr; fd `out` carries the protocol
    sys.stdout = sys.stderr
    line = _read_line(0, None)
    if line is None:
        return
    spec = json.loads(line)
    try:
        module, _, fn = spec["factory"].partition(":")
        factory = getattr(importlib.import_module(module), fn)(**spec.get("args", {}))
    except BaseException as e:
        _send(out, {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]})
        return
    template = Template(factory, dict(spec.get("limits", {})))
    _send(out, {"ready": True})
    while True:
        line = _read_line(0, None)
        if line is None:
            break
        req = json.loads(line)
        op = req.get("op")
        if op == "open":
            reply = template.open(req.get("args"))
        elif op == "call":
            reply = template.call(req.get("args"), float(req.get("timeout", 10)))
        elif op == "close":
            template.close()
            reply = {"ok": True}
        else:
            reply = {"error": f"unknown op {op!r}"}
        _send(out, reply)
    template.close()


if __name__ == "__main__":
    main()

"""The in-sandbox runner: a tiny server that executes commands for the host.

It runs *inside* the sandbox (as the container's PID 1, as bubblewrap's PID 1, or as a
plain child process for ``unsafe-local``), reads requests from stdin and writes responses
to stdout. Standard library only, Python >= 3.9, so it runs on the image's Debian python3.

Wire format (both directions): a 4-byte big-endian length, then that many bytes of UTF-8
JSON. Binary payloads (stdin, output, file contents) travel as base64 strings. Requests::

    {"op": "ping"}
    {"op": "exec", "argv": [...], "stdin": b64, "timeout": s, "env": {..}, "limit": n, "rlimits": {..}}
    {"op": "write", "files": {relpath: b64}}
    {"op": "read", "path": relpath, "max_bytes": n}
    {"op": "list", "path": relpath}        (regular files only, at most MAX_LIST of them)

Responses carry ``"ok": true`` or ``"ok": false, "kind": <error class name>, "error": msg``.

Why a runner: a ``docker exec`` costs an API round trip plus a runc setup (~50-100 ms);
the runner costs one fork/exec. Each command starts in a new session (its own process
group) with rlimits; on timeout the group is killed; after the command ends, every process
it left behind is killed too (when the runner is PID 1 of its namespace it signals all of
them with ``kill(-1)``, which cannot reach PID 1 itself).
"""

from __future__ import annotations

import base64
import json
import os
import resource
import select
import signal
import stat
import struct
import subprocess
import sys
import time

__all__ = ["MAX_MESSAGE", "decode_frame_length", "encode_message", "execute", "handle", "main"]

MAX_MESSAGE = 256 * 1024 * 1024  # refuse absurd frames rather than allocating them
MAX_LIST = 100_000  # list_files answers at most this many paths
_HEADER = struct.Struct(">I")
_CHUNK = 65536
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
_RLIMITS = {
    "nofile": resource.RLIMIT_NOFILE,
    "fsize": resource.RLIMIT_FSIZE,
    "as": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "cpu": resource.RLIMIT_CPU,
    "core": resource.RLIMIT_CORE,
    "stack": resource.RLIMIT_STACK,
}


def encode_message(obj: object) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return _HEADER.pack(len(body)) + body


def decode_frame_length(header: bytes) -> int:
    (n,) = _HEADER.unpack(header)
    if n > MAX_MESSAGE:
        raise ValueError(f"frame of {n} bytes exceeds the {MAX_MESSAGE}-byte limit")
    return n


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


# --------------------------------------------------------------------------- exec
def _preexec(rlimits: dict) -> None:
    # Runs in the child between fork and exec. Raise our OOM score so that the kernel
    # kills the command, not the runner, when the cgroup runs out of memory.
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    for name, value in rlimits.items():
        res = _RLIMITS[name]
        v = int(value)
        try:
            resource.setrlimit(res, (v, v))
        except (ValueError, OSError):
            # Cannot raise a hard limit above what we hold: clamp to it.
            _, hard = resource.getrlimit(res)
            if hard != resource.RLIM_INFINITY and v > hard:
                resource.setrlimit(res, (hard, hard))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def _kill_leftovers(pgid: int) -> None:
    """Kill the command's process group and, as PID 1, every other process in the namespace."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    if os.getpid() == 1:
        for _ in range(2):  # a second sweep catches anything forked during the first
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass


def _reap_all(deadline: float) -> None:
    """Collect zombies (orphans are re-parented to PID 1) so they do not eat the pid limit."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)


def execute(req: dict, workdir: str) -> dict:
    argv = [str(a) for a in req["argv"]]
    stdin_data = _unb64(req.get("stdin", ""))
    timeout = float(req.get("timeout", 10.0))
    limit = int(req.get("limit", 65536))
    env = dict(BASE_ENV, HOME=workdir, TMPDIR="/tmp")
    env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
    rlimits = dict(req.get("rlimits") or {})
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=env,
            start_new_session=True,  # own session and process group: killable as a unit
            preexec_fn=lambda: _preexec(rlimits),
            close_fds=True,
        )
    except OSError as exc:  # no such program, E2BIG for huge argv, EAGAIN at the pid limit
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        return {
            "ok": True, "stdout": "", "stderr": _b64(f"{argv[0]}: {exc}\n".encode()),
            "exit_code": code, "timed_out": False, "duration": time.monotonic() - t0,
            "stdout_truncated": False, "stderr_truncated": False,
        }
    p_in, p_out, p_err = proc.stdin, proc.stdout, proc.stderr
    assert p_in is not None and p_out is not None and p_err is not None
    pgid = proc.pid
    deadline = t0 + timeout
    bufs = {p_out.fileno(): bytearray(), p_err.fileno(): bytearray()}
    totals = dict.fromkeys(bufs, 0)
    open_fds = set(bufs)
    pidfd = os.pidfd_open(proc.pid) if hasattr(os, "pidfd_open") else None
    stdin_fd = p_in.fileno()
    os.set_blocking(stdin_fd, False)
    pending = memoryview(stdin_data)
    if not pending:
        p_in.close()
        stdin_fd = -1
    timed_out = False
    exited = False
    drain_deadline: float | None = None

    def _read(fd: int) -> None:
        try:
            chunk = os.read(fd, _CHUNK)
        except OSError:
            chunk = b""
        if not chunk:
            open_fds.discard(fd)
            return
        totals[fd] += len(chunk)
        room = limit - len(bufs[fd])
        if room > 0:
            bufs[fd] += chunk[:room]  # beyond the cap the bytes are read and dropped

    while open_fds or not exited:
        now = time.monotonic()
        if not exited and now >= deadline:
            timed_out = True
            _kill_leftovers(pgid)
            exited = True
            drain_deadline = now + 0.5
        if drain_deadline is not None and now >= drain_deadline:
            break
        rlist = list(open_fds)
        if pidfd is not None and not exited:
            rlist.append(pidfd)
        wlist = [stdin_fd] if stdin_fd >= 0 else []
        wait = (drain_deadline if drain_deadline is not None else deadline) - now
        if pidfd is None and not exited:
            wait = min(wait, 0.01)
        r, w, _ = select.select(rlist, wlist, [], max(wait, 0.0))
        for fd in r:
            if fd == pidfd:
                exited = True
            else:
                _read(fd)
        if w:
            try:
                n = os.write(stdin_fd, pending[:_CHUNK])
                pending = pending[n:]
            except OSError:  # EPIPE: the command stopped reading
                pending = pending[:0]
            if not pending:
                p_in.close()
                stdin_fd = -1
        if not exited and pidfd is None and proc.poll() is not None:
            exited = True
        if exited and drain_deadline is None:
            # The command is gone: kill whatever it left behind (they may hold our pipes
            # open), then read what is still buffered in the pipes until EOF.
            _kill_leftovers(pgid)
            drain_deadline = time.monotonic() + 0.5
    duration = time.monotonic() - t0
    if stdin_fd >= 0:
        p_in.close()
    _kill_leftovers(pgid)
    exit_code = proc.wait()
    if timed_out:
        exit_code = -signal.SIGKILL
    if pidfd is not None:
        os.close(pidfd)
    p_out.close()
    p_err.close()
    if os.getpid() == 1:
        _reap_all(time.monotonic() + 1.0)
    fds = list(bufs)  # [stdout fd, stderr fd], in insertion order
    return {
        "ok": True,
        "stdout": _b64(bytes(bufs[fds[0]])),
        "stderr": _b64(bytes(bufs[fds[1]])),
        "exit_code": exit_code,
        "timed_out": timed_out,
        "duration": duration,
        "stdout_truncated": totals[fds[0]] > limit,
        "stderr_truncated": totals[fds[1]] > limit,
    }


# --------------------------------------------------------------------------- files
# Paths from the host are resolved inside the work dir one component at a time, each opened
# relative to its parent's descriptor with O_NOFOLLOW: a symlink the code planted (to /etc,
# to /, to ".") is never followed, whatever it points at and whatever the host's lexical
# checks saw. A symlink as the *last* component of a write is replaced by the new file, like
# any other non-regular file there; anywhere else, the request fails with PermissionError.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _parts(rel: str) -> list:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if rel.startswith("/") or ".." in parts:
        raise PermissionError(f"{rel!r} is outside the work dir")
    return parts


def _open_dir(workdir: str, parts: list, rel: str, create: bool = False) -> int:
    """A descriptor of the directory ``workdir/parts...``, never through a symlink."""
    fd = os.open(workdir, _DIR_FLAGS)
    try:
        for i, name in enumerate(parts):
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise FileNotFoundError(f"no directory {'/'.join(parts[:i + 1])!r} in the work dir") from None
                os.mkdir(name, 0o755, dir_fd=fd)
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:  # ELOOP: a symlink; ENOTDIR: a file where a directory is needed
                where = "/".join(parts[:i + 1])
                if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise PermissionError(f"{rel!r}: {where!r} is a symlink; the sandbox's file helpers "
                                          "never follow symlinks") from exc
                raise NotADirectoryError(f"{rel!r}: {where!r} is not a directory") from exc
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write(req: dict, workdir: str) -> dict:
    for rel, data in req["files"].items():
        parts = _parts(rel)
        if not parts:
            raise IsADirectoryError(f"{rel!r} is the work dir itself")
        dfd = _open_dir(workdir, parts[:-1], rel, create=True)
        try:
            name = parts[-1]
            # Whatever the code left at this path (a FIFO would block open() forever, a symlink
            # would redirect the write) is replaced by a plain new file.
            try:
                mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    raise IsADirectoryError(f"{rel!r} is a directory in the work dir")
                if not stat.S_ISREG(mode):
                    os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644, dir_fd=dfd)
            with os.fdopen(fd, "wb") as f:
                f.write(_unb64(data))
        finally:
            os.close(dfd)
    return {"ok": True}


def _read_file(req: dict, workdir: str) -> dict:
    rel = req["path"]
    parts = _parts(rel)
    if not parts:
        raise FileNotFoundError(f"{rel!r} is not a regular file")
    dfd = _open_dir(workdir, parts[:-1], rel)
    try:
        # O_NONBLOCK: opening a FIFO the code planted must not hang the runner.
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise FileNotFoundError(f"{rel!r} is not a regular file (a symlink or special file)") from exc
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileNotFoundError(f"{rel!r} is not a regular file")
        return {"ok": True, "data": _b64(f.read(int(req.get("max_bytes", 1_000_000))))}


def _list(req: dict, workdir: str) -> dict:
    rel = req.get("path", ".")
    try:
        top = _open_dir(workdir, _parts(rel), rel)
    except (FileNotFoundError, NotADirectoryError):
        return {"ok": True, "files": []}
    prefix = "/".join(_parts(rel))
    out = []
    try:
        # fwalk on descriptors, not following symlinks: a link to / is neither listed nor entered.
        for dirpath, _dirs, names, dfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            for name in names:
                try:
                    if stat.S_ISREG(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                        out.append(os.path.normpath(os.path.join(prefix, dirpath, name)))
                except OSError:
                    continue
            if len(out) >= MAX_LIST:
                break
    finally:
        os.close(top)
    return {"ok": True, "files": sorted(out)[:MAX_LIST]}


def handle(req: dict, workdir: str) -> dict:
    ops = {"exec": execute, "write": _write, "read": _read_file, "list": _list}
    op = req.get("op")
    if op == "ping":
        return {"ok": True, "pid": os.getpid(), "uid": os.getuid()}
    try:
        return ops[str(op)](req, workdir)
    except KeyError as exc:
        return {"ok": False, "kind": "KeyError", "error": f"bad request: {exc}"}
    except Exception as exc:  # noqa: BLE001 - report any failure to the host, keep serving
        return {"ok": False, "kind": type(exc).__name__, "error": str(exc)}


def _read_exact(fd: int, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _no_ptrace() -> None:
    # Not dumpable: commands running as the same uid cannot ptrace the runner or open
    # /proc/<runner>/fd/* to forge responses on its stdout.
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - hardening only
        pass


def main(argv: list[str]) -> int:
    workdir = os.path.abspath(argv[0] if argv else os.getcwd())
    _no_ptrace()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if os.getpid() == 1:
        # As PID 1 we keep no handlers on purpose (not even Python's KeyboardInterrupt one):
        # the kernel then drops every signal sent from inside the namespace, so the code
        # cannot stop the runner. The host ends us by closing stdin or removing the container.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    else:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: sys.exit(0))
    rfd, wfd = sys.stdin.fileno(), sys.stdout.fileno()
    while True:
        header = _read_exact(rfd, 4)
        if header is None:
            return 0  # host hung up: the sandbox ends with it
        body = _read_exact(rfd, decode_frame_length(header))
        if body is None:
            return 0
        try:
            resp = handle(json.loads(body), workdir)
        except ValueError as exc:
            resp = {"ok": False, "kind": "ValueError", "error": f"bad request: {exc}"}
        out = memoryview(encode_message(resp))
        while out:
            out = out[os.write(wfd, out):]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The sandbox contract every backend implements.

A :class:`Sandbox` runs untrusted commands for one episode. It owns a work dir, which is the
current directory of every command; the paths given to :meth:`Sandbox.write_files`,
:meth:`Sandbox.read_file` and :meth:`Sandbox.list_files` are relative to it. Results come back
as an :class:`ExecResult`: the failures of the code inside (non-zero exit, timeout, output
flood) are data, never exceptions. Exceptions (from :mod:`agentgym.errors`) are for the
machine: :class:`~agentgym.errors.SandboxUnavailable` when the backend cannot run at all,
:class:`~agentgym.errors.SandboxStateError` when a closed sandbox is used.

Backends: ``"docker"`` (default, containers from a warm pool), ``"bwrap"`` (bubblewrap
namespaces, no daemon), ``"unsafe-local"`` (plain subprocess; trusted code only, never chosen
unless named). Build one with :func:`agentgym.sandboxes.make_sandbox`.
"""

from __future__ import annotations

import abc
import difflib
import enum
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from agentgym.errors import ConfigError, SandboxStateError

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_TIMEOUT",
    "ExecResult",
    "Sandbox",
    "SandboxState",
    "check_options",
    "check_relpath",
]

DEFAULT_TIMEOUT = 10.0
# Each of stdout and stderr is cut at this many bytes; the rest is drained and thrown away
# inside the sandbox so the host never buffers a flood.
DEFAULT_OUTPUT_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What one command did.

    ``exit_code`` is the process exit status, or ``-N`` when it was killed by signal ``N``
    (``-9`` after a timeout). ``stdout``/``stderr`` are decoded as UTF-8 with replacement
    characters and hold at most the backend's output limit; the ``*_truncated`` flags say
    that more was produced and dropped.
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    duration_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0 within its timeout."""
        return self.exit_code == 0 and not self.timed_out


class SandboxState(enum.Enum):
    """Lifecycle of a sandbox: usable until closed, and closed forever after."""

    OPEN = "open"
    CLOSED = "closed"


def check_options(backend: str, options: dict[str, Any], known: Iterable[str]) -> None:
    """Refuse option names a backend does not take, naming the closest known one."""
    known = sorted(known)
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown option {name!r} for the {backend} sandbox{hint} "
                              f"Known options: {', '.join(known)}")


def check_relpath(path: str) -> str:
    """Return ``path`` normalised, refusing absolute paths and ``..`` escapes.

    The host-side helpers (write/read/list) take work-dir-relative paths only; the code
    inside may of course do what it likes within its own limits.
    """
    if not isinstance(path, str) or not path:
        raise ConfigError(f"expected a non-empty relative path, got {path!r}")
    if "\x00" in path:
        raise ConfigError(f"expected a path without NUL bytes, got {path!r}")
    if path.startswith("/"):
        raise ConfigError(
            f"expected a path relative to the sandbox work dir, got absolute {path!r}; "
            "drop the leading '/'"
        )
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../"):
        raise ConfigError(f"expected a path inside the sandbox work dir, got {path!r}")
    return norm


class Sandbox(abc.ABC):
    """One isolated place to run commands, for one episode.

    Subclasses implement the ``_``-prefixed hooks; the public methods check the lifecycle
    and arguments first. Use as a context manager or call :meth:`close` (idempotent).
    """

    #: absolute path of the work dir as the code inside sees it
    workdir: str = "/work"
    #: backend name, as given to :func:`make_sandbox`
    backend: str = "abstract"

    def __init__(self) -> None:
        self._state = SandboxState.OPEN

    # ----------------------------------------------------------------- lifecycle
    @property
    def state(self) -> SandboxState:
        return self._state

    @property
    def closed(self) -> bool:
        return self._state is SandboxState.CLOSED

    def _check_open(self) -> None:
        if self._state is SandboxState.CLOSED:
            raise SandboxStateError(
                f"this {self.backend} sandbox is closed; expected an open one. "
                "Create a new sandbox with make_sandbox() (or acquire one from the pool)."
            )

    def close(self) -> None:
        """Release everything the sandbox holds (container, temp dir). Safe to call twice."""
        if self._state is SandboxState.CLOSED:
            return
        self._state = SandboxState.CLOSED
        self._close()

    def __enter__(self) -> Sandbox:
        self._check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ----------------------------------------------------------------- public API
    def run(
        self,
        cmd: str | list[str],
        *,
        stdin: str | bytes = b"",
        timeout: float = DEFAULT_TIMEOUT,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run ``cmd`` in the work dir. A string goes through ``/bin/sh -c``; a list is argv.

        ``timeout`` is wall-clock seconds; when it passes, the whole process group is killed
        and the result has ``timed_out=True``. ``env`` adds variables to the sandbox's
        minimal environment (the host's environment never leaks in).
        """
        self._check_open()
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ConfigError(f"expected a command string or a non-empty list of str, got {cmd!r}")
        if not timeout > 0:
            raise ConfigError(f"expected timeout > 0 seconds, got {timeout!r}")
        data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
        return self._run(argv, data, float(timeout), dict(env or {}))

    def run_python(
        self, code: str, *, stdin: str | bytes = b"", timeout: float = DEFAULT_TIMEOUT
    ) -> ExecResult:
        """Run a Python 3 snippet (``python3 -c code``) in the work dir."""
        return self.run(["python3", "-c", code], stdin=stdin, timeout=timeout)

    def write_files(self, files: dict[str, str | bytes]) -> None:
        """Create or overwrite files (parents created); str content is written as UTF-8."""
        self._check_open()
        clean = {
            check_relpath(p): (c.encode() if isinstance(c, str) else bytes(c))
            for p, c in files.items()
        }
        if clean:
            self._write_files(clean)

    def read_file(self, path: str, max_bytes: int = 1_000_000) -> bytes:
        """Return at most ``max_bytes`` of a file.

        ``FileNotFoundError`` when there is no *regular* file there (missing, or a FIFO,
        device or directory the code put in its place).
        """
        self._check_open()
        return self._read_file(check_relpath(path), int(max_bytes))

    def list_files(self, path: str = ".") -> list[str]:
        """Sorted paths of the regular files under ``path``, recursive, relative to the work
        dir (symlinks and special files left out; at most 100,000 paths)."""
        self._check_open()
        return sorted(self._list_files(check_relpath(path)))

    def reset(self) -> None:
        """Start a fresh episode: the work dir is wiped (backends may replace the container)."""
        self._check_open()
        self._reset()

    # ----------------------------------------------------------------- backend hooks
    @abc.abstractmethod
    def _run(self, argv: list[str], stdin: bytes, timeout: float, env: dict[str, str]) -> ExecResult:
        ...

    @abc.abstractmethod
    def _write_files(self, files: dict[str, bytes]) -> None:
        ...

    @abc.abstractmethod
    def _read_file(self, path: str, max_bytes: int) -> bytes:
        ...

    @abc.abstractmethod
    def _list_files(self, path: str) -> list[str]:
        ...

    @abc.abstractmethod
    def _reset(self) -> None:
        ...

    @abc.abstractmethod
    def _close(self) -> None:
        ...

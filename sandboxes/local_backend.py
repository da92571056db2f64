"""``unsafe-local``: the runner as a plain child process in a temp dir. NOT a sandbox.

Only timeouts, output caps and rlimits apply; the code can read and write anything the
host user can, and reach the network. It exists for trusted code (tests of the
environments themselves, machines without Docker or bubblewrap) and is never picked unless
named. It warns on every construction.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import warnings

from agentgym.sandboxes import runner as runner_module
from agentgym.sandboxes.base import DEFAULT_OUTPUT_LIMIT
from agentgym.sandboxes.runner_client import PipeTransport, RunnerClient, RunnerSandbox

__all__ = ["UnsafeLocalSandbox"]


class UnsafeLocalSandbox(RunnerSandbox):
    """Run commands on the host in a fresh temp dir, with timeouts and output caps only.

    Options: ``output_limit`` (bytes per stream), ``mem_limit_bytes`` (RLIMIT_AS per
    process), ``fsize_bytes`` (RLIMIT_FSIZE), ``nofile``.
    """

    backend = "unsafe-local"

    def __init__(
        self,
        *,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        mem_limit_bytes: int = 2 << 30,
        fsize_bytes: int = 64 << 20,
        nofile: int = 256,
    ) -> None:
        warnings.warn(
            "agentgym 'unsafe-local' sandbox: code runs UNSANDBOXED on this host with your "
            "user's rights; use it only for trusted code (pick 'docker' or 'bwrap' otherwise)",
            RuntimeWarning,
            stacklevel=3,
        )
        rl = {"as": mem_limit_bytes, "fsize": fsize_bytes, "nofile": nofile, "core": 0}
        super().__init__(output_limit=output_limit, rlimits=rl)
        self._tmp: str | None = None
        self._connection()  # start now so that errors surface at construction

    @property
    def workdir(self) -> str:  # type: ignore[override]
        return self._tmp or ""

    def _start(self) -> RunnerClient:
        self._tmp = tempfile.mkdtemp(prefix="agentgym-unsafe-")
        proc = subprocess.Popen(
            [sys.executable, "-I", runner_module.__file__, self._tmp],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=self._tmp,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
            start_new_session=True,
        )
        return RunnerClient(PipeTransport(proc))

    def _stop(self, conn: RunnerClient) -> None:
        conn.close()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

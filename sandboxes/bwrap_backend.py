"""bubblewrap backend: the same runner, in Linux namespaces, with no daemon.

Each sandbox is one ``bwrap`` process whose PID 1 is the runner (``--as-pid-1``), in new
user, pid, net, ipc, uts and cgroup namespaces, with every capability dropped, no further
user namespaces (``--disable-userns``), a new session, and ``--die-with-parent``. The root
is the sandbox image's rootfs (``agentgym sandbox build`` keeps it in the cache), mounted
read-only; ``/work`` and ``/tmp`` are size-limited tmpfs. When the host is root, ``bwrap``
itself is started under a fresh unprivileged host uid, so even an escape lands in an
account that owns nothing and whose process count is this sandbox alone.

Limits: RLIMIT_NPROC (per that uid), RLIMIT_AS (per process), RLIMIT_FSIZE, RLIMIT_NOFILE,
tmpfs sizes, and wall-clock timeouts in the runner. Total memory and pids across the whole
sandbox are capped by cgroups when the host lets us create them (root with a writable
cgroup v1 ``memory``/``pids`` hierarchy or cgroup v2); otherwise only the per-process
RLIMIT_AS bounds memory (processes x RLIMIT_AS in the worst case) and this is reported by
:attr:`BwrapSandbox.cgroup_limits`.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from agentgym.errors import SandboxUnavailable
from agentgym.sandboxes import runner as runner_module
from agentgym.sandboxes.base import DEFAULT_OUTPUT_LIMIT
from agentgym.sandboxes.image import RUNNER_PATH, SANDBOX_UID, WORKDIR, cache_dir, rootfs_path, wait_for_build
from agentgym.sandboxes.runner_client import PipeTransport, RunnerClient, RunnerGone, RunnerSandbox

__all__ = ["BwrapSandbox", "bwrap_available"]

_HOST_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc/alternatives",
              "/etc/ld.so.cache")


def bwrap_available() -> str | None:
    """None when bubblewrap can create a sandbox here, else the reason and the fix."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap is not installed; `apt-get install bubblewrap`"
    # Bind only the system dirs: binding all of / recursively races with mounts that come and
    # go meanwhile (another user's container overlays) and fails at random.
    binds = [a for d in _HOST_DIRS for a in ("--ro-bind-try", d, d)]
    probe = subprocess.run([exe, "--unshare-all", *binds, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return (f"bwrap cannot create namespaces here ({probe.stderr.strip()}); enable "
                "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)")
    return None


class _Cgroup:
    """A per-sandbox cgroup (v2, or v1 memory+pids) if the host allows it, else inert."""

    def __init__(self, name: str, mem_bytes: int, pids: int) -> None:
        self.dirs: list[Path] = []
        if os.geteuid() != 0:
            return
        root = Path("/sys/fs/cgroup")
        try:
            if (root / "cgroup.controllers").exists():  # unified v2 hierarchy
                d = root / "agentgym" / name
                d.mkdir(parents=True)
                self.dirs.append(d)
                (d / "memory.max").write_text(str(mem_bytes))
                (d / "memory.swap.max").write_text("0")
                (d / "pids.max").write_text(str(pids))
            elif (root / "memory").is_dir() and (root / "pids").is_dir():
                m = root / "memory" / "agentgym" / name
                p = root / "pids" / "agentgym" / name
                m.mkdir(parents=True)
                self.dirs.append(m)
                p.mkdir(parents=True)
                self.dirs.append(p)
                (m / "memory.limit_in_bytes").write_text(str(mem_bytes))
                (p / "pids.max").write_text(str(pids))
        except OSError:
            self.remove()

    @property
    def active(self) -> bool:
        return bool(self.dirs)

    def enter(self) -> None:
        """Move the calling process in (runs in the child before exec)."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        # The namespace's processes die asynchronously after its PID 1 exits: retry briefly.
        deadline = time.monotonic() + 2.0
        for d in self.dirs:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.005)
        self.dirs = []


class BwrapSandbox(RunnerSandbox):
    """A sandbox in bubblewrap namespaces; ``reset()`` starts a fresh one (~20 ms).

    Options: ``rootfs`` (a directory to mount read-only as ``/``; default the built image
    rootfs; ``"host"`` binds the host's /usr, /bin, /lib... instead, so that no build is
    needed but the host's python3 is used), ``mem_limit_bytes``, ``pids_limit``, ``nofile``,
    ``fsize_bytes``, ``workdir_size_bytes``, ``tmp_size_bytes``, ``output_limit``,
    ``use_cgroups`` (default True: use them when the host allows).
    """

    backend = "bwrap"
    workdir = WORKDIR

    def __init__(
        self,
        *,
        rootfs: str | os.PathLike[str] | None = None,
        mem_limit_bytes: int = 512 << 20,
        pids_limit: int = 128,
        nofile: int = 256,
        fsize_bytes: int = 64 << 20,
        workdir_size_bytes: int = 64 << 20,
        tmp_size_bytes: int = 32 << 20,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        use_cgroups: bool = True,
    ) -> None:
        problem = bwrap_available()
        if problem:
            raise SandboxUnavailable(f"the bwrap backend cannot run: {problem}")
        if rootfs is None:
            path = rootfs_path()
            if not (path / RUNNER_PATH.lstrip("/")).is_file():
                wait_for_build()  # `agentgym sandbox build` may be running: its rootfs, once done
            if not (path / RUNNER_PATH.lstrip("/")).is_file():
                raise SandboxUnavailable(
                    f"expected the sandbox rootfs at {path}, it is missing; build it with "
                    "`agentgym sandbox build` (or `agentgym sandbox build --rootfs-only` "
                    "without Docker), or pass rootfs='host' to use the host's /usr"
                )
            self.rootfs: str = str(path)
        else:
            self.rootfs = str(rootfs)
        rl = {"as": mem_limit_bytes, "nproc": pids_limit, "nofile": nofile,
              "fsize": fsize_bytes, "core": 0}
        super().__init__(output_limit=output_limit, rlimits=rl)
        self.mem_limit_bytes = mem_limit_bytes
        self.pids_limit = pids_limit
        self.sizes = (workdir_size_bytes, tmp_size_bytes)
        self.use_cgroups = use_cgroups
        self.cgroup_limits = False
        self._cgroup: _Cgroup | None = None
        self._connection()

    def _argv(self) -> list[str]:
        work, tmp = self.sizes
        argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user",
                "--disable-userns",
                "--die-with-parent", "--new-session", "--as-pid-1",
                "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
        if self.rootfs == "host":
            for d in _HOST_DIRS:
                argv += ["--ro-bind-try", d, d]
            argv += ["--ro-bind", str(_readable_runner()), RUNNER_PATH]
        else:
            argv += ["--ro-bind", self.rootfs, "/"]
        # bwrap's /dev is a writable, unbounded tmpfs: make it read-only after giving it
        # a size-limited /dev/shm (like Docker's 16 MiB shm).
        argv += ["--proc", "/proc", "--dev", "/dev",
                 "--size", str(16 << 20), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
                 "--size", str(tmp), "--tmpfs", "/tmp",
                 "--size", str(work), "--tmpfs", WORKDIR, "--chdir", WORKDIR,
                 "--cap-drop", "ALL", "--clearenv",
                 "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
                 "--setenv", "LANG", "C.UTF-8",
                 "--", "python3", "-I", RUNNER_PATH, WORKDIR]
        return argv

    def _start(self) -> RunnerClient:
        name = f"{os.getpid()}-{random.getrandbits(48):012x}"
        cg = _Cgroup(name, self.mem_limit_bytes, self.pids_limit + 8) if self.use_cgroups else None
        self._cgroup = cg
        self.cgroup_limits = bool(cg and cg.active)
        # As root, bwrap runs under a fresh unprivileged uid (and so does everything inside):
        # RLIMIT_NPROC then counts this sandbox's processes only, and nothing on the host
        # belongs to that uid.
        host_id = random.randrange(1 << 20, 1 << 30) if os.geteuid() == 0 else None
        rl = dict(self.rlimits)

        def preexec() -> None:
            import resource

            if cg is not None and cg.active:
                cg.enter()
            for name_, res in (("nofile", resource.RLIMIT_NOFILE),
                               ("fsize", resource.RLIMIT_FSIZE), ("core", resource.RLIMIT_CORE)):
                resource.setrlimit(res, (rl[name_], rl[name_]))
            if host_id is not None:
                os.setgroups([])
                os.setgid(host_id)
                os.setuid(host_id)

        errlog = tempfile.TemporaryFile()  # bwrap's own setup errors, read only on failure
        try:
            proc = subprocess.Popen(
                self._argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=errlog, env={}, cwd="/", start_new_session=True,
                preexec_fn=preexec,
            )
        except OSError as exc:
            if cg is not None:
                cg.remove()
            raise SandboxUnavailable(f"could not start bwrap: {exc}") from exc
        conn = RunnerClient(PipeTransport(proc))
        try:
            pong = conn.call({"op": "ping"}, 30.0)
        except RunnerGone as exc:
            conn.close()
            errlog.seek(0)
            err = errlog.read(4000).decode("utf-8", "replace").strip()
            if cg is not None:
                cg.remove()
            raise SandboxUnavailable(
                f"bwrap did not start the runner: {err or exc}; if the rootfs at "
                f"{self.rootfs} is not readable by other users, rebuild it with "
                "`agentgym sandbox build --force` (it lands in a world-readable cache dir)"
            ) from exc
        finally:
            errlog.close()
        if not pong.get("ok"):
            raise SandboxUnavailable(f"the runner inside bwrap answered {pong!r} to ping")
        return conn

    def _stop(self, conn: RunnerClient) -> None:
        conn.close()  # EOF -> the runner (PID 1) exits -> the kernel kills the namespace
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None


def _readable_runner() -> Path:
    """A world-readable copy of the runner for host-rootfs mode.

    The sandbox user cannot traverse a private checkout (a clone under a 0700 ``mktemp -d``),
    so the runner is bound from the cache dir, where the image rootfs lives too.
    """
    src = Path(runner_module.__file__).read_bytes()
    dst = cache_dir() / f"runner-{hashlib.sha256(src).hexdigest()[:12]}.py"
    if not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(src)
        tmp.chmod(0o644)
        os.replace(tmp, dst)
    return dst

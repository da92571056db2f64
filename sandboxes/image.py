"""The sandbox image: a minimal Debian with python3 and pytest, built without a registry.

Recipe (``build_image``): ``debootstrap --variant=minbase`` of Debian bookworm from the
mirror apt already uses, a non-root ``sandbox`` user (uid 1000), the runner at
``/opt/agentgym/runner.py``, setuid bits stripped, docs and caches dropped; then the rootfs is
kept in the cache dir (the bubblewrap backend mounts it read-only as ``/``) and piped as a
tar into ``docker import``. The tag ``agentgym-sandbox:<hash12>`` hashes the recipe (this
file, the runner, the package list), so a changed recipe gets a new image and a stale one is
never used. Where a registry is reachable, ``build_image(dockerfile=True)`` builds the same
tag from :data:`DOCKERFILE` instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentgym.errors import SandboxUnavailable
from agentgym.sandboxes import runner as runner_module

__all__ = [
    "DOCKERFILE",
    "IMAGE_REPO",
    "PACKAGES",
    "SANDBOX_UID",
    "build_image",
    "build_rootfs",
    "cache_dir",
    "debian_mirror",
    "image_tag",
    "recipe_hash",
    "rootfs_path",
]

IMAGE_REPO = "agentgym-sandbox"
SUITE = "bookworm"
PACKAGES = ("python3", "python3-pytest")
SANDBOX_UID = 1000
RUNNER_PATH = "/opt/agentgym/runner.py"
WORKDIR = "/work"
RUNNER_CMD = ["python3", "-I", RUNNER_PATH, WORKDIR]
DEFAULT_MIRROR = "http://deb.debian.org/debian"

DOCKERFILE = f"""\
# Same image from a registry base, for machines that can pull debian:{SUITE}-slim.
FROM debian:{SUITE}-slim
RUN apt-get update && apt-get install -y --no-install-recommends {' '.join(PACKAGES)} \\
    && rm -rf /var/lib/apt/lists/* /usr/share/doc /usr/share/man \\
    && groupadd -g {SANDBOX_UID} sandbox \\
    && useradd -u {SANDBOX_UID} -g {SANDBOX_UID} -d {WORKDIR} -s /bin/sh sandbox \\
    && mkdir -p {WORKDIR} /opt/agentgym \\
    && find / -xdev -perm /6000 -type f -exec chmod ug-s {{}} +
COPY runner.py {RUNNER_PATH}
USER sandbox
WORKDIR {WORKDIR}
CMD {str(RUNNER_CMD).replace("'", '"')}
"""


def recipe_hash() -> str:
    """12 hex digits of sha256 over everything that decides the image's content."""
    h = hashlib.sha256()
    for part in (Path(__file__).read_bytes(), Path(runner_module.__file__).read_bytes(),
                 SUITE.encode(), "\n".join(PACKAGES).encode()):
        h.update(len(part).to_bytes(8, "big") + part)
    return h.hexdigest()[:12]


def image_tag() -> str:
    return f"{IMAGE_REPO}:{recipe_hash()}"


def cache_dir() -> Path:
    """``$AGENTGYM_CACHE/sandbox``; for root ``/var/cache/agentgym/sandbox`` (not under
    /root, which is mode 0700: the bwrap backend mounts the rootfs as an unprivileged uid),
    else ``~/.cache/agentgym/sandbox``."""
    base = os.environ.get("AGENTGYM_CACHE")
    if not base:
        if os.geteuid() == 0:
            base = "/var/cache/agentgym"
        else:
            base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                "agentgym")
    return Path(base) / "sandbox"


_held = False  # this process holds the build lock (build_image -> build_rootfs nest)


def build_lock_path() -> Path:
    """The lock a build holds: ``agentgym sandbox build`` and the backends agree through it."""
    return cache_dir() / "build.lock"


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Hold the build lock (exclusive, across processes): one build at a time, and a backend that
    finds the image missing waits for a build in progress (:func:`wait_for_build`)."""
    global _held
    if _held:
        yield
        return
    path = build_lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        _held = True
        try:
            yield
        finally:
            _held = False
            fcntl.flock(f, fcntl.LOCK_UN)


def wait_for_build(timeout: float = 900.0, log: Any = print) -> None:
    """Return once no build of the image is in progress (at once when none is); a backend calls it
    before it reports the image missing. Raises :class:`SandboxUnavailable` after ``timeout`` s."""
    path = build_lock_path()
    if _held or not path.exists():
        return
    with open(path) as f:
        deadline = time.monotonic() + timeout
        said = False
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if not said:
                    log(f"waiting for the sandbox image build in progress (lock {path}) ...")
                    said = True
                if time.monotonic() > deadline:
                    raise SandboxUnavailable(
                        f"expected the sandbox image build in progress to finish within {timeout:.0f} s, "
                        f"it still holds {path}; check the process running `agentgym sandbox build`"
                    ) from None
                time.sleep(0.2)


def rootfs_path() -> Path:
    """Where the current recipe's rootfs lives (it exists once ``build_rootfs`` ran)."""
    return cache_dir() / recipe_hash() / "rootfs"


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt is configured with (deb822 or one-line sources), or deb.debian.org.

    ``$AGENTGYM_DEBIAN_MIRROR`` wins; security and third-party suites are skipped.
    """
    if os.environ.get("AGENTGYM_DEBIAN_MIRROR"):
        return os.environ["AGENTGYM_DEBIAN_MIRROR"]
    sources = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for src in sources:
        try:
            text = src.read_text()
        except OSError:
            continue
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            if uris and re.search(rf"^Suites:.*\b{SUITE}\b", stanza, re.M) and "security" not in uris.group(1):
                return uris.group(1)
        m = re.search(rf"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+{SUITE}\s", text, re.M)
        if m and "security" not in m.group(1):
            return m.group(1)
    return DEFAULT_MIRROR


def _finish_rootfs(root: Path) -> None:
    """Turn the debootstrapped tree into the sandbox image's rootfs."""
    etc = root / "etc"
    with open(etc / "passwd", "a") as f:
        f.write(f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:agentgym sandbox:{WORKDIR}:/bin/sh\n")
    with open(etc / "group", "a") as f:
        f.write(f"sandbox:x:{SANDBOX_UID}:\n")
    (root / WORKDIR.lstrip("/")).mkdir(mode=0o755, exist_ok=True)
    # No resolver: the sandbox has no network, and the build host's nameserver address is
    # none of its business (glibc then tries 127.0.0.1, the sandbox's own empty loopback).
    (etc / "resolv.conf").unlink(missing_ok=True)
    (etc / "resolv.conf").write_text("")
    opt = root / "opt" / "agentgym"
    opt.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(runner_module.__file__, opt / "runner.py")
    os.chmod(opt / "runner.py", 0o644)
    for junk in ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
                 "var/cache/apt", "var/lib/apt/lists"):
        shutil.rmtree(root / junk, ignore_errors=True)
    # Defence in depth: no setuid/setgid programs at all (no-new-privileges also neuters them).
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))


def build_rootfs(*, force: bool = False, log: Any = print) -> Path:
    """Debootstrap the rootfs into the cache (needs root and ``debootstrap``); return its path.
    Under the build lock: a concurrent build is waited for, then its result used."""
    with build_lock():
        return _build_rootfs(force=force, log=log)


def _build_rootfs(*, force: bool, log: Any) -> Path:
    final = rootfs_path()
    if final.is_dir() and not force:
        return final
    if shutil.which("debootstrap") is None:
        raise SandboxUnavailable(
            "expected `debootstrap` to build the sandbox image, found none; "
            "install it with `apt-get install debootstrap`"
        )
    if os.geteuid() != 0:
        raise SandboxUnavailable("building the sandbox rootfs needs root (debootstrap); "
                                 "run `sudo agentgym sandbox build`")
    final.parent.mkdir(parents=True, exist_ok=True)
    for d in (final.parent, final.parent.parent):
        os.chmod(d, 0o755)  # traversable by the unprivileged uid bwrap runs as
    tmp = Path(tempfile.mkdtemp(prefix="rootfs-", dir=final.parent))
    mirror = debian_mirror()
    base = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}"]
    # The downloaded .debs are kept (keyed by suite + packages, not by the whole recipe), so
    # a rebuild after a runner change installs from the cache instead of the network.
    debs = cache_dir() / f"debs-{SUITE}-{hashlib.sha256(repr(PACKAGES).encode()).hexdigest()[:8]}.tgz"
    steps = [] if debs.is_file() else [base + [f"--make-tarball={debs}", SUITE, str(tmp) + "-dl", mirror]]
    steps.append(base + [f"--unpack-tarball={debs}", SUITE, str(tmp), mirror])
    for cmd in steps:
        log(f"$ {' '.join(cmd)}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        shutil.rmtree(str(tmp) + "-dl", ignore_errors=True)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            if "--make-tarball" not in cmd[3]:
                debs.unlink(missing_ok=True)  # maybe a corrupt cache: next build downloads
            tail = (proc.stdout + proc.stderr)[-2000:]
            raise SandboxUnavailable(
                f"debootstrap failed (exit {proc.returncode}) with mirror {mirror}; check that "
                f"the mirror is reachable or set AGENTGYM_DEBIAN_MIRROR. Output tail:\n{tail}"
            )
    _finish_rootfs(tmp)
    os.chmod(tmp, 0o755)  # mkdtemp made it 0700
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


def _docker_client() -> Any:
    from agentgym.sandboxes.docker_backend import docker_client

    return docker_client()


def build_image(*, force: bool = False, dockerfile: bool = False, log: Any = print) -> str:
    """Make sure ``image_tag()`` exists in the Docker engine (build it if not); return the tag.
    Under the build lock (and so the rootfs with it)."""
    with build_lock():
        return _build_image(force=force, dockerfile=dockerfile, log=log)


def _build_image(*, force: bool, dockerfile: bool, log: Any) -> str:
    t0 = time.monotonic()
    client = _docker_client()
    tag = image_tag()
    repo, version = tag.split(":")
    # The rootfs (cached by the same hash) is what the bwrap backend mounts: keep it in step.
    root = None if dockerfile else build_rootfs(force=force, log=log)
    if not force:
        try:
            client.images.get(tag)
            log(f"{tag} is up to date")
            return tag
        except Exception:  # docker.errors.ImageNotFound
            pass
    if dockerfile:
        with tempfile.TemporaryDirectory() as ctx:
            Path(ctx, "Dockerfile").write_text(DOCKERFILE)
            shutil.copyfile(runner_module.__file__, Path(ctx, "runner.py"))
            log(f"docker build -t {tag} (Dockerfile; needs registry access for debian:{SUITE}-slim)")
            client.images.build(path=ctx, tag=tag, rm=True, labels={"agentgym.recipe": version})
    else:
        assert root is not None
        with tempfile.NamedTemporaryFile(suffix=".tar", dir=root.parent) as tar_file:
            with tarfile.open(fileobj=tar_file, mode="w") as tar:
                tar.add(root, arcname=".")
            tar_file.flush()
            log(f"docker import -> {tag}")
            changes = [
                f"USER {SANDBOX_UID}:{SANDBOX_UID}", f"WORKDIR {WORKDIR}",
                f"CMD {str(RUNNER_CMD).replace(chr(39), chr(34))}",
                "ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8",
                f"LABEL agentgym.recipe={version}",
            ]
            client.api.import_image_from_file(tar_file.name, repository=repo, tag=version,
                                              changes=changes)
    client.images.get(tag)  # raises if the import silently produced nothing
    log(f"built {tag} in {time.monotonic() - t0:.1f} s")
    return tag

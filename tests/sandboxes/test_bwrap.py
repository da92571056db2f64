"""bubblewrap specifics: host-uid mapping, cgroups, the host-rootfs mode."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from agentgym.sandboxes import make_sandbox
from agentgym.sandboxes.bwrap_backend import BwrapSandbox

pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("bwrap_ready")]


def _host_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError("no Uid line")


def test_as_root_the_sandbox_runs_under_an_unprivileged_host_uid() -> None:
    sb = make_sandbox("bwrap")
    try:
        assert isinstance(sb, BwrapSandbox)
        bwrap_pid = sb._connection().transport.proc.pid  # type: ignore[attr-defined]
        uid = _host_uid(bwrap_pid)
        assert sb.run("id -u").stdout == "1000\n"  # what the code sees
        if os.geteuid() == 0:
            assert uid >= 1 << 20  # what the host sees: a fresh uid owning nothing
            assert sb.cgroup_limits == (Path("/sys/fs/cgroup/memory").is_dir()
                                        or Path("/sys/fs/cgroup/cgroup.controllers").exists())
        else:
            assert uid == os.geteuid()
    finally:
        sb.close()


def test_reset_starts_a_new_namespace() -> None:
    sb = make_sandbox("bwrap")
    try:
        first = sb._connection().transport.proc  # type: ignore[attr-defined]
        sb.write_files({"a": "1"})
        sb.reset()
        assert first.poll() is not None  # the old bwrap (and with it the namespace) is gone
        assert sb._connection().transport.proc is not first  # type: ignore[attr-defined]
        assert sb.list_files() == []
    finally:
        sb.close()


def test_host_rootfs_mode_works_and_still_hides_host_files(tmp_path: Path) -> None:
    secret = secrets.token_hex(8)
    (tmp_path / "canary").write_text(secret)
    sb = make_sandbox("bwrap", rootfs="host")
    try:
        r = sb.run(f"python3 -c 'print(6*7)'; cat {tmp_path}/canary; ls /root /home /etc 2>&1")
        assert r.stdout.startswith("42\n")
        assert secret not in r.stdout
        assert "shadow" not in r.stdout and "passwd" not in r.stdout
    finally:
        sb.close()

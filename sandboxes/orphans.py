"""Finding the sandbox containers of dead processes (by label) and removing them."""

from __future__ import annotations

import os
import socket
from typing import Any

__all__ = ["LABEL", "OWNER_LABEL", "is_orphan", "list_sandbox_containers", "owner_id",
           "remove_orphans"]

LABEL = "agentgym.sandbox"
OWNER_LABEL = "agentgym.owner"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # comm (field 2) may contain spaces; fields after the closing ')' are fixed.
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_id(pid: int | None = None) -> str:
    """``<hostname>:<pid>:<start time>`` of the process owning a container."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def is_orphan(owner: str) -> bool:
    """True when ``owner`` names a process on this host that no longer runs."""
    try:
        host, pid, start = owner.rsplit(":", 2)
    except ValueError:
        return True  # malformed label: nobody can claim it
    if host != socket.gethostname():
        return False  # another machine sharing the engine; not ours to judge
    return _start_time(int(pid)) != start


def list_sandbox_containers(client: Any) -> list[dict[str, Any]]:
    """``[{"Id": ..., "Labels": {...}, "State": ...}, ...]`` of every sandbox container.

    The low-level listing, in one API call: the high-level one inspects each container
    afterwards and fails on any that is removed in between (pools remove them all the time).
    """
    return list(client.api.containers(all=True, filters={"label": f"{LABEL}=1"}))


def remove_orphans(client: Any, *, everything: bool = False) -> list[str]:
    """Remove labelled containers whose owner died (or all of them); return their short ids."""
    removed = []
    for c in list_sandbox_containers(client):
        if everything or is_orphan((c.get("Labels") or {}).get(OWNER_LABEL, "")):
            try:
                client.api.remove_container(c["Id"], force=True)
                removed.append(c["Id"][:12])
            except Exception:  # already removed, or removal in progress
                pass
    return removed

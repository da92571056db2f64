"""Where a pretrained name points: a local folder, the Hugging Face cache, or the hub.

``from_pretrained`` on a name that is neither a folder nor cached tries the hub with retries
and backoff, which offline means about a minute of waiting before an error that calls a
mistyped path a "hub repo id". :func:`pretrained_kwargs` answers in well under a second first:

* a name that is a folder is used as it is;
* a name written as a path (``/x``, ``./x``, ``~/x``, ``a/b/c``) that is not a folder is
  "no such directory";
* a hub id (``org/name`` or ``name``) that is cached loads from the cache
  (``local_files_only``) when the hub is off (``HF_HUB_OFFLINE=1``) or unreachable;
* a hub id that is not cached fails at once when the hub is off or unreachable (one TCP
  connect to the hub's host, at most :data:`PROBE_TIMEOUT_S`).
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from agentgym.errors import AgentGymError, ConfigError

__all__ = ["PROBE_TIMEOUT_S", "hub_offline", "pretrained_kwargs"]

PROBE_TIMEOUT_S = 1.0
_TRUE = {"1", "true", "yes", "on"}


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` ask for no network at all."""
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


@functools.lru_cache(maxsize=4)
def _reachable(endpoint: str) -> str | None:
    """None when a TCP connection to the hub opens within the probe timeout, else why not."""
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        return f"{host}:{port} cannot be reached ({e.strerror or type(e).__name__})"
    return None


def _cached(repo_id: str) -> bool:
    cache = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.join(os.path.expanduser("~"), ".cache", "huggingface")), "hub")
    return (Path(cache) / ("models--" + repo_id.replace("/", "--"))).is_dir()


def _looks_like_path(name: str) -> bool:
    return (name.startswith(("/", "./", "../", "~", ".\\")) or name in (".", "..")
            or name.count("/") > 1 or os.sep != "/" and os.sep in name)


def pretrained_kwargs(name: str, what: str, error: type[AgentGymError] = ConfigError) -> dict[str, Any]:
    """Extra ``from_pretrained`` keyword arguments for ``name``, or ``error`` at once when it
    cannot load (module doc). ``what``: "tokenizer", "model", ... for the message."""
    if os.path.isdir(os.path.expanduser(name)):
        return {}
    if _looks_like_path(name):
        raise error(f"{what} {name!r}: no such directory (expected a folder with the {what}'s files, "
                    "e.g. a run dir's checkpoint, or a hub id like 'openai/gpt-oss-20b')")
    why = "HF_HUB_OFFLINE is set" if hub_offline() else _reachable(_endpoint())
    if why is None:
        return {}
    if _cached(name):
        return {"local_files_only": True}
    raise error(f"{what} {name!r} is not a local folder and not in the Hugging Face cache, and the hub "
                f"cannot be used: {why}. Pass a local folder, or download it on a machine with access "
                "(huggingface-cli download NAME) and copy the cache over")

"""agentgym.sandboxes: run hostile code (docker, bubblewrap) behind one contract.

>>> from agentgym.sandboxes import make_sandbox
>>> with make_sandbox("docker") as sb:          # doctest: +SKIP
...     sb.write_files({"a.py": "print(6*7)"})
...     sb.run("python3 a.py").stdout
'42\\n'

Backends are imported lazily so that ``import agentgym.sandboxes`` never touches Docker.
There is no silent fallback: when the named backend cannot run, ``make_sandbox`` raises
:class:`~agentgym.errors.SandboxUnavailable` saying how to fix it.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from agentgym.errors import ConfigError
from agentgym.sandboxes.base import ExecResult, Sandbox, SandboxState, check_options

if TYPE_CHECKING:
    from agentgym.sandboxes.docker_backend import SandboxPool

__all__ = ["BACKENDS", "ExecResult", "Sandbox", "SandboxPool", "SandboxState", "make_sandbox"]

#: backend name -> "module:callable" building a Sandbox from keyword options
BACKENDS: dict[str, str] = {
    "docker": "agentgym.sandboxes.docker_backend:make_docker_sandbox",
    "bwrap": "agentgym.sandboxes.bwrap_backend:BwrapSandbox",
    "unsafe-local": "agentgym.sandboxes.local_backend:UnsafeLocalSandbox",
}


def make_sandbox(backend: str = "docker", **options: Any) -> Sandbox:
    """Build a sandbox of the named backend (``"docker"``, ``"bwrap"`` or ``"unsafe-local"``).

    Options are passed to the backend (for docker: ``pool=``, ``pool_size=``, ``image=``,
    ``mem_limit_bytes=``, ...; see each backend's docstring); a name the backend does not take
    is a ``ConfigError`` naming the closest one. Raises ``SandboxUnavailable`` when the
    backend cannot run.
    """
    if backend not in BACKENDS:
        close = difflib.get_close_matches(str(backend), list(BACKENDS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"expected a sandbox backend in {sorted(BACKENDS)}, got {backend!r}{hint}")
    import importlib

    module, attr = BACKENDS[backend].split(":")
    factory = getattr(importlib.import_module(module), attr)
    if backend != "docker":  # docker checks its own (pool options go through DockerOptions)
        import inspect

        params = inspect.signature(factory).parameters.values()
        check_options(backend, options, [p.name for p in params if p.kind is p.KEYWORD_ONLY])
    sandbox: Sandbox = factory(**options)
    return sandbox


def __getattr__(name: str) -> Any:
    # SandboxPool lives with the docker backend; import it on first use only.
    if name == "SandboxPool":
        from agentgym.sandboxes.docker_backend import SandboxPool

        return SandboxPool
    raise AttributeError(f"module 'agentgym.sandboxes' has no attribute {name!r}")

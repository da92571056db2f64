"""The judge's child, run *inside the sandbox*: imports the candidate module, answers calls.

Not imported by agentgym: :mod:`.judge` reads this file as text and the judge starts it with
``python3 -I -S -c SOURCE RFD WFD PATH ENTRY_POINT`` (stdlib only; nothing of it on the sandbox's
disk). Calls arrive pickled on fd ``RFD`` (trusted -> untrusted); each result goes back on fd
``WFD`` as tagged JSON (:func:`enc`), which the judge decodes into plain values only.
Frames on both pipes: 8-byte big-endian length, then the body.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import sys
from typing import Any


def enc(x: Any, depth: int = 0) -> Any:
    """A result as JSON with type tags (t tuple, s set, f frozenset, d dict, b bytes, c complex,
    F non-finite float, o anything else, as its repr)."""
    if depth > 200:
        raise ValueError("result nested too deeply")
    t = type(x)
    if x is None or t in (bool, int, str):
        return x
    if t is float:
        return x if math.isfinite(x) else {"F": repr(x)}
    if t is list:
        return [enc(v, depth + 1) for v in x]
    if t is tuple:
        return {"t": [enc(v, depth + 1) for v in x]}
    if t in (set, frozenset):
        return {"s" if t is set else "f": [enc(v, depth + 1) for v in x]}
    if t is dict:
        return {"d": [[enc(k, depth + 1), enc(v, depth + 1)] for k, v in x.items()]}
    if t is bytes:
        return {"b": x.decode("latin-1")}
    if t is complex:
        return {"c": [x.real, x.imag]}
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return enc(float(x))
    if isinstance(x, str):
        return str(x)
    return {"o": type(x).__name__ + ": " + repr(x)[:200]}


def send(wfd: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    os.write(wfd, len(data).to_bytes(8, "big"))
    view = memoryview(data)
    while view:
        view = view[os.write(wfd, view):]


def recv(rfd: int) -> Any:
    head = b""
    while len(head) < 8:
        chunk = os.read(rfd, 8 - len(head))
        if not chunk:
            sys.exit(0)
        head += chunk
    n, buf = int.from_bytes(head, "big"), b""
    while len(buf) < n:
        chunk = os.read(rfd, n - len(buf))
        if not chunk:
            sys.exit(0)
        buf += chunk
    return pickle.loads(buf)


def main() -> None:
    rfd, wfd, path, entry = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    sys.path.insert(0, os.getcwd())
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("solution", path)
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules["solution"] = mod
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        fn = getattr(mod, entry)
        send(wfd, {"ready": True})
    except BaseException as e:
        send(wfd, {"error": f"cannot import {path}: {type(e).__name__}: {str(e)[:300]}"})
        sys.exit(0)
    while True:
        args, kwargs = recv(rfd)
        try:
            send(wfd, {"value": enc(fn(*args, **kwargs))})
        except BaseException as e:
            send(wfd, {"error": f"{type(e).__name__}: {str(e)[:300]}"})


if __name__ == "__main__":
    main()

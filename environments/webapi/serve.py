"""The server process: ``python -m agentgym.environments.webapi.serve [options]``.

Binds a loopback socket (port 0 picks a free one), prints one line
``AGENTGYM_WEBAPI_READY port=<port> pid=<pid>`` on stdout once it accepts connections, and
serves the store with uvicorn until SIGTERM/SIGINT, or until its parent process dies: a
watcher thread polls the parent pid, so a crashed parent never leaves a server behind.
On the way out it deletes every episode database it made.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

from agentgym.environments.webapi.store_wire import READY_PREFIX

__all__ = ["main"]


def _watch_parent(parent_pid: int, stop: threading.Event, on_orphan: Callable[[], None]) -> None:
    while not stop.wait(0.25):
        # Re-parented (to init or a subreaper) or the pid vanished: the parent is gone.
        if os.getppid() != parent_pid:
            on_orphan()
            return


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--database-url", default=None, help="postgresql://... (default: SQLite files)")
    p.add_argument("--data-dir", default=None, help="where SQLite episode files live (default: a temp dir, "
                   "deleted on exit)")
    p.add_argument("--delete-data-dir", action="store_true", help="delete --data-dir on exit too")
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process dies")
    p.add_argument("--fixture-seed", type=int, default=None, help="seed of the train store (default: "
                   "store_wire.FIXTURES; the eval store keeps its own)")
    p.add_argument("--test-endpoints", action="store_true", help="serve GET /_test/sleep (for tests)")
    p.add_argument("--log-level", default="warning")
    args = p.parse_args(argv)

    import uvicorn  # imported here: `--help` stays fast

    from agentgym.environments.webapi.app import create_app
    from agentgym.environments.webapi.storage import open_store
    from agentgym.environments.webapi.store_wire import FIXTURES

    fixtures = dict(FIXTURES) if args.fixture_seed is None else {**FIXTURES, "train": args.fixture_seed}
    store = open_store(fixtures, args.database_url, args.data_dir, delete_dir=args.delete_data_dir)
    app = create_app(store, test_endpoints=args.test_endpoints)
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto
    # says TCP, and without it small responses wait ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(1024)
    config = uvicorn.Config(app, log_level=args.log_level, access_log=False, lifespan="off",
                            timeout_keep_alive=300, backlog=1024, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    stop = threading.Event()

    def orphaned() -> None:
        server.should_exit = True
        # If the graceful path hangs (a stuck request), leave anyway after a grace period.
        def leave() -> None:
            store.close()
            os._exit(0)

        threading.Timer(5.0, leave).start()

    if args.parent_pid is not None:
        if os.getppid() != args.parent_pid:  # died before we even started
            store.close()
            return 0
        threading.Thread(target=_watch_parent, args=(args.parent_pid, stop, orphaned), daemon=True).start()

    # uvicorn handles SIGTERM gracefully, then re-raises it with the handler it found: make
    # that handler a clean exit so the finally below still deletes the episode databases.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    port = sock.getsockname()[1]
    started = threading.Thread(target=_announce, args=(server, port), daemon=True)
    started.start()
    try:
        server.run(sockets=[sock])
    finally:
        stop.set()
        store.close()
    return 0


def _announce(server: object, port: int) -> None:
    while not getattr(server, "started", False):
        if getattr(server, "should_exit", False):
            return
        time.sleep(0.005)
    sys.stdout.write(f"{READY_PREFIX} port={port} pid={os.getpid()}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())

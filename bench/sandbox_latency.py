"""Sandbox latency: runner vs `docker exec`, warm-pool acquire/reset vs a cold container.

    .venv/bin/python bench/sandbox_latency.py [--n 100] [--out /tmp/latency.md]

Every ratio compares two numbers measured in this same run, interleaved call by call so
that background load hits both sides alike:

* command latency of ``python3 -c 'print(1)'``: ``Sandbox.run`` in a warm docker sandbox
  (through the in-container runner) against ``docker exec`` of the same command in the same
  container, via the docker SDK (``exec_run``, the cheapest exec path) and via the CLI;
  target ratio <= 0.5;
* episode start: ``pool.acquire()`` and ``sandbox.reset()`` from the warm pool against a
  cold start of the same container (create + start + first answer), and against a plain
  ``docker run --rm <image> true``; target ratio <= 0.1;
* the same command latency and reset on the bwrap backend, for reference.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from agentgym.sandboxes import SandboxPool, make_sandbox
from agentgym.sandboxes.image import image_tag

CMD = ["python3", "-c", "print(1)"]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def wait_ready(pool: SandboxPool) -> None:
    while pool._ready.qsize() < pool.size:
        time.sleep(0.01)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100, help="iterations per latency measurement")
    ap.add_argument("--n-start", type=int, default=20, help="iterations for start latencies")
    ap.add_argument("--out", help="also write the markdown table here")
    args = ap.parse_args()

    rows: list[tuple[str, list[float]]] = []
    pool = SandboxPool(size=2)
    wait_ready(pool)
    sb = pool.acquire()
    container = pool.client.containers.get(sb.container_id)
    for _ in range(5):  # warm page cache / python imports on both paths
        sb.run(CMD)
        container.exec_run(CMD, user="1000:1000")

    conn = sb._connection()
    ping = [timed(lambda: conn.call({"op": "ping"}, 10.0)) for _ in range(args.n)]
    rows.append(("docker: runner ping round trip (attach socket transport)", ping))
    runner, sdk_exec, cli_exec = [], [], []
    for _ in range(args.n):
        runner.append(timed(lambda: sb.run(CMD)))
        sdk_exec.append(timed(lambda: container.exec_run(CMD, user="1000:1000")))
    for _ in range(max(10, args.n // 5)):
        cli_exec.append(timed(lambda: subprocess.run(
            ["docker", "exec", "-u", "1000:1000", container.id, *CMD], capture_output=True)))
    rows += [("docker: Sandbox.run (runner)", runner),
             ("docker: exec_run (SDK) same container", sdk_exec),
             ("docker: `docker exec` CLI same container", cli_exec)]
    sb.close()

    acquire, reset, cold, cli_run = [], [], [], []
    for _ in range(args.n_start):
        wait_ready(pool)
        t = time.perf_counter()
        s = pool.acquire()
        acquire.append(time.perf_counter() - t)
        wait_ready(pool)
        reset.append(timed(s.reset))
        s.close()
        t = time.perf_counter()
        warm = pool._create()  # the same container config, started cold (no pool)
        cold.append(time.perf_counter() - t)
        pool.discard(warm)
    for _ in range(max(5, args.n_start // 2)):
        cli_run.append(timed(lambda: subprocess.run(
            ["docker", "run", "--rm", "--network", "none", image_tag(), "true"],
            capture_output=True)))
    rows += [("docker: pool.acquire()", acquire), ("docker: sandbox.reset() (warm pool)", reset),
             ("docker: cold container (create+start+ping)", cold),
             ("docker: `docker run --rm image true` CLI", cli_run)]
    pool.close()

    bw = make_sandbox("bwrap")
    for _ in range(5):
        bw.run(CMD)
    bconn = bw._connection()
    rows += [("bwrap: runner ping round trip (pipes)",
              [timed(lambda: bconn.call({"op": "ping"}, 10.0)) for _ in range(args.n)]),
             ("bwrap: Sandbox.run", [timed(lambda: bw.run(CMD)) for _ in range(args.n)]),
             ("bwrap: sandbox.reset()", [timed(bw.reset) for _ in range(args.n_start)])]
    bw.close()

    p50 = {name: statistics.median(xs) for name, xs in rows}
    lines = [
        f"machine: {platform.node()} {platform.machine()}, python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"command: `{' '.join([sys.executable.split('/')[-1], *sys.argv])}`",
        "",
        "| measurement | n | p50 ms | p90 ms |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {len(xs)} | {1e3 * statistics.median(xs):.2f} | {1e3 * pct(xs, 0.9):.2f} |"
              for name, xs in rows]
    r_cmd = p50["docker: Sandbox.run (runner)"] / p50["docker: exec_run (SDK) same container"]
    r_cmd90 = pct(runner, 0.9) / pct(sdk_exec, 0.9)
    r_acq = p50["docker: pool.acquire()"] / p50["docker: cold container (create+start+ping)"]
    r_rst = p50["docker: sandbox.reset() (warm pool)"] / p50["docker: cold container (create+start+ping)"]
    lines += [
        "",
        f"- command latency ratio runner / docker exec (SDK), p50: **{r_cmd:.3f}** "
        f"(p90: {r_cmd90:.3f}; target <= 0.5)",
        f"- episode start ratio pool.acquire / cold container, p50: **{r_acq:.4f}**; "
        f"reset / cold: **{r_rst:.4f}** (target <= 0.1)",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

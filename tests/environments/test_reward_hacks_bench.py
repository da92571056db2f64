"""``bench/reward_hacks.py`` runs in CI: it prints the hack table and fails when a hack is paid.

The full table (every env, the large sample, CodeFix's sandbox) takes minutes; CI plays the
small sample on Math-v1, whose table holds the verifier's hacks (negations in words, bounds,
self-corrections, unknown operators, percents, the echoed question and its last clause).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agentgym.environments.hacks import Hack, final, hacks_for

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "reward_hacks.py"


def test_the_bench_prints_the_math_table_and_exits_0() -> None:
    r = subprocess.run([sys.executable, str(BENCH), "--size", "small", "--env", "agentgym/Math-v1"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = {line[2:50].strip(): line.split() for line in r.stdout.splitlines() if line.startswith("  ")}
    for hack in hacks_for("agentgym/Math-v1"):
        assert hack.name in rows, f"{hack.name!r} missing from the table"
        applies, paid = int(rows[hack.name][-3]), int(rows[hack.name][-2])
        assert applies > 0 and paid == 0, (hack.name, rows[hack.name])
    assert "hack table: 0 paid episodes" in r.stdout


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reward_hacks_bench", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_paid_hack_is_counted(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The right answer, entered as a "hack", is paid: the table counts it (the exit status is 1)."""
    bench = _bench()
    monkeypatch.setattr(bench, "hacks_for",
                        lambda env_id: [Hack("the right answer", lambda u: [final(str(u.task.answer))])])
    assert bench.hack_table(["agentgym/Math-v1"], "docker", "small") > 0
    assert "the right answer" in capsys.readouterr().out

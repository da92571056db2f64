"""Hostile submission files cannot knock the verifier over: a gzip bomb is refused within bounded
time and memory, deep JSON and huge integers are one-line problems, ``leaderboard build`` skips a
bad file and still writes the board, and verification never opens a network connection."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentgym.leaderboards.board import build_board
from agentgym.leaderboards.cli import leaderboard_main
from agentgym.leaderboards.limits import MAX_DEPTH, LineError, nesting_too_deep, parse_line
from agentgym.leaderboards.suite import Suite
from agentgym.leaderboards.verify import verify_submission

from .conftest import SMALL, make_submission, read_lines, write_lines, write_suite

MATH_ONLY = {**SMALL, "name": "hostile", "envs": SMALL["envs"][:1]}


@pytest.fixture(scope="module")
def math_suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    return write_suite(tmp_path_factory.mktemp("suite"), MATH_ONLY)


@pytest.fixture(scope="module")
def math_oracle(math_suite: Suite, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_submission(math_suite, "oracle", tmp_path_factory.mktemp("subs") / "oracle.jsonl")


# ------------------------------------------------------------------ bounded parsing, line by line

def test_deep_json_is_refused_before_parsing() -> None:
    deep = '{"kind":"episode","x":' + "[" * 5000 + "]" * 5000 + "}"
    with pytest.raises(LineError, match=f"nested more than {MAX_DEPTH} deep"):
        parse_line(deep)
    with pytest.raises(LineError, match="do not pair up"):
        parse_line("[" * 1_000_000)
    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert nesting_too_deep(ok) is None and parse_line(ok) is not None
    # Brackets inside strings, escaped quotes included, are text, not nesting.
    text = json.dumps({"s": "[" * 500 + '\\"' + "{" * 500, "t": ["]" * 300]})
    assert parse_line(text)["s"].startswith("[[[")


def test_huge_and_non_finite_numbers_are_refused() -> None:
    with pytest.raises(LineError, match="an integer of 5000 digits"):
        parse_line('{"kind":"header","seed":' + "7" * 5000 + "}")
    with pytest.raises(LineError, match="larger than"):
        parse_line('{"seed": 99999999999999999999}')  # 20 digits, > 2^64
    for bad in ('{"x": 1e999}', '{"x": NaN}', '{"x": -Infinity}'):
        with pytest.raises(LineError, match="not finite|not a JSON number"):
            parse_line(bad)
    assert parse_line('{"seed": 18446744073709551615, "s": "' + "9" * 5000 + '", "f": 1e300}')["seed"] == 2**64 - 1


# ------------------------------------------------------------------ whole files: bombs, in a fresh process

# Memory from /proc: ru_maxrss would carry the forking pytest process's size over the exec;
# VmHWM is the peak of this process's own address space.
MEASURE = """
import json, resource, sys, time
from agentgym.leaderboards.verify import verify_submission
def status(key):
    return int(next(x for x in open("/proc/self/status") if x.startswith(key + ":")).split()[1]) / 1024
before, rss = resource.getrusage(resource.RUSAGE_SELF), status("VmRSS")
t0 = time.perf_counter()
report = verify_submission(sys.argv[1])
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"ok": report.ok, "problems": report.problems, "wall": time.perf_counter() - t0,
                  "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                  "peak_mb": status("VmHWM"), "before_mb": rss}))
"""


def _bomb(path: Path, unit: bytes, size: int = 16 << 20) -> Path:
    path.write_bytes(gzip.compress(unit * (size // len(unit)), 9))
    return path


@pytest.mark.parametrize(("unit", "size"), [(b"0", 16 << 20), (b"\n", 16 << 20), (b"[", 16 << 20),
                                            (b'{"kind":"episode"}\n', 6 << 20)],
                         ids=["zeros", "newlines", "brackets", "one-line-repeated"])
def test_gzip_bomb_is_refused_in_bounded_time_and_memory(tmp_path: Path, unit: bytes, size: int) -> None:
    bomb = _bomb(tmp_path / "bomb.jsonl.gz", unit, size)
    assert bomb.stat().st_size <= 16 * 1024, bomb.stat().st_size  # a 16 KB file that inflates to megabytes
    r = subprocess.run([sys.executable, "-c", MEASURE, str(bomb)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout.strip().splitlines()[-1])
    assert not m["ok"] and len(m["problems"]) <= 105, m["problems"][:3]
    assert m["cpu"] < 2.0, m  # CPU seconds: the box may be loaded, the work is what is bounded
    assert m["peak_mb"] - m["before_mb"] < 200, m  # peak resident memory over what it was before verifying
    print(f"{bomb.stat().st_size} B -> {size >> 20} MiB: {m['cpu']:.2f} s CPU, {m['wall']:.2f} s wall, "
          f"+{m['peak_mb'] - m['before_mb']:.0f} MB peak")


def test_oversized_line_and_file_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.leaderboards import submission

    monkeypatch.setattr(submission, "MAX_LINE_BYTES", 1000)
    long = tmp_path / "long.jsonl"
    long.write_text('{"kind":"header"}\n' + '{"kind":"episode","pad":"' + "x" * 2000 + '"}\n')
    report = verify_submission(long)
    assert report.problems[0] == ("line 2 is longer than 1,000 bytes: longer than any line agentgym-eval writes; "
                                  "refused without reading further")
    monkeypatch.setattr(submission, "MAX_FILE_BYTES", 100)
    many = tmp_path / "many.jsonl.gz"
    many.write_bytes(gzip.compress("".join(f"{i}\n" for i in range(100)).encode()))
    report = verify_submission(many)
    assert report.problems == ["the file holds more than 100 bytes (uncompressed) by line 37: larger than any "
                               "submission agentgym-eval writes (a compression bomb?); refused without reading further"]


# ------------------------------------------------------------------ the command line: one line, no traceback

def test_verify_prints_one_line_problems_not_tracebacks(tmp_path: Path, math_oracle: Path, math_suite: Suite,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    lines = read_lines(math_oracle)
    text = math_oracle.read_text().splitlines()
    deep = tmp_path / "deep.jsonl"
    deep.write_text("\n".join([text[0], '{"kind":"episode","x":' + "[" * 5000 + "]" * 5000 + "}", *text[2:]]) + "\n")
    digits = tmp_path / "digits.jsonl"
    digits.write_text("\n".join([text[0], text[1].replace(f'"seed":{lines[1]["seed"]}', '"seed":' + "9" * 5000),
                                 *text[2:]]) + "\n")
    suite_file = tmp_path / "suite.yaml"
    import yaml

    suite_file.write_text(yaml.safe_dump(math_suite.content, sort_keys=False))
    rc = leaderboard_main(["verify", "--suite", str(suite_file), "--no-progress", str(deep), str(digits)])
    out = capsys.readouterr()
    assert rc == 1
    assert "Traceback" not in out.out + out.err
    assert f"line 2: arrays and objects are nested more than {MAX_DEPTH} deep" in out.out
    assert "line 2: an integer of 5000 digits" in out.out


def test_build_skips_a_hostile_file_and_still_writes_the_board(tmp_path: Path, math_oracle: Path,
                                                                 math_suite: Suite) -> None:
    import yaml

    root = tmp_path / "root"
    (root / "suites").mkdir(parents=True)
    (root / "suites" / "hostile.yaml").write_text(yaml.safe_dump(math_suite.content, sort_keys=False))
    subs = root / "submissions" / "hostile"
    subs.mkdir(parents=True)
    shutil.copy(math_oracle, subs / "oracle.jsonl")
    _bomb(subs / "bomb.jsonl.gz", b"0")
    (subs / "deep.jsonl").write_text("[" * 100_000 + "\n")
    (subs / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")  # a dangling link: the read itself fails
    result = build_board(root, workers=2)
    assert not result.ok
    text = "\n".join(result.problems)
    for name in ("bomb.jsonl.gz", "deep.jsonl", "gone.jsonl"):
        assert f"submissions/hostile/{name}" in text, text
    assert "| oracle |" in (root / "LEADERBOARD.md").read_text()
    assert (root / "board" / "site" / "index.html").exists()


# ------------------------------------------------------------------ offline: no socket is ever opened

def test_verification_never_touches_the_network(tmp_path: Path, math_oracle: Path, math_suite: Suite,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        attempts.append(address)
        raise OSError("the test forbids network connections")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    lines = read_lines(math_oracle)
    lines[0]["submission"]["tokenizer"] = {"spec": "someone/tokenizer-not-here", "name": "someone/tokenizer-not-here",
                                           "vocab_size": 201088}
    path = write_lines(tmp_path / "hub.jsonl", lines)
    report = verify_submission(path, suite=math_suite, workers=1)
    assert not report.ok
    assert any("'someone/tokenizer-not-here' is not available locally (verification never downloads" in p
               for p in report.problems), report.problems
    assert verify_submission(math_oracle, suite=math_suite, workers=1).ok  # a clean file verifies offline
    assert attempts == []


# ------------------------------------------------------------------ mixed policies: a scripted policy's name on another's episodes

def test_a_scripted_header_on_another_policys_episodes_is_refused(tmp_path: Path, math_oracle: Path,
                                                                  math_suite: Suite) -> None:
    """Two of the oracle's episodes among do-nothing's, under do-nothing's name: each replays, but
    re-running the scripted policy the header names refuses them."""
    genuine = verify_submission(math_oracle, suite=math_suite, workers=2)
    assert genuine.ok and genuine.scripted == "oracle"
    nothing = make_submission(math_suite, "do-nothing", tmp_path / "nothing.jsonl")
    lines = read_lines(math_oracle)
    lines[0]["submission"] = read_lines(nothing)[0]["submission"]
    mixed = write_lines(tmp_path / "mixed.jsonl", lines[:1] + lines[1:3] + read_lines(nothing)[3:])
    report = verify_submission(mixed, suite=math_suite, workers=2)
    assert not report.ok and report.scripted is None
    text = "\n".join(report.problems)
    assert "line 2: agentgym/Math-v1 task 0 (index=0) trial 0: the actions are not those of the scripted policy " \
           "'do-nothing' that the header names (the verifier re-ran it)" in text, text
    # A header that names custom code is never run by the verifier: the entry stays a claim.
    lines = read_lines(math_oracle)
    lines[0]["submission"]["policy_args"] = {"oracle": "os:system"}
    custom = verify_submission(write_lines(tmp_path / "custom.jsonl", lines), suite=math_suite, workers=2)
    assert custom.ok and custom.scripted is None

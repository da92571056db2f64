"""The Sandbox contract, run against every backend (docker, bwrap, unsafe-local)."""

from __future__ import annotations

import dataclasses

import pytest

from agentgym.errors import ConfigError, SandboxStateError
from agentgym.sandboxes import ExecResult, Sandbox, make_sandbox
from agentgym.sandboxes.base import DEFAULT_OUTPUT_LIMIT

SANDBOX_BACKENDS = ("docker", "bwrap", "unsafe-local")


def test_run_shell_string_gives_stdout_stderr_and_exit_code(sb: Sandbox) -> None:
    r = sb.run("echo out; echo err >&2; exit 3")
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out) == ("out\n", "err\n", 3, False)
    assert not r.ok
    assert sb.run("true").ok


def test_run_argv_list_is_not_shell_split(sb: Sandbox) -> None:
    r = sb.run(["python3", "-c", "import sys; print(sys.argv[1:])", "a b", "$HOME", "*"])
    assert r.stdout == "['a b', '$HOME', '*']\n"


def test_cwd_is_the_workdir_and_it_is_absolute(sb: Sandbox) -> None:
    assert sb.workdir.startswith("/")
    assert sb.run("pwd").stdout.strip() == sb.workdir


def test_stdin_text_and_binary_round_trip(sb: Sandbox) -> None:
    echo = "import sys; sys.stdout.write(sys.stdin.buffer.read().hex())"
    data = bytes(range(256)) * 3
    assert sb.run_python(echo, stdin=data).stdout == data.hex()
    assert sb.run("cat", stdin="héllo\n").stdout == "héllo\n"
    big = b"x" * (1 << 20)  # larger than a pipe buffer: the runner must not deadlock
    assert sb.run("wc -c", stdin=big).stdout.strip() == str(len(big))


def test_env_is_passed_to_the_command(sb: Sandbox) -> None:
    r = sb.run("echo $FOO-$BAR", env={"FOO": "1", "BAR": "two words"})
    assert r.stdout == "1-two words\n"


def test_files_in_and_out(sb: Sandbox) -> None:
    sb.write_files({"a.txt": "hello", "pkg/mod.py": "X = 42\n", "bin.dat": b"\x00\xff\x10"})
    assert sb.list_files() == ["a.txt", "bin.dat", "pkg/mod.py"]
    assert sb.list_files("pkg") == ["pkg/mod.py"]
    assert sb.read_file("bin.dat") == b"\x00\xff\x10"
    assert sb.read_file("a.txt", max_bytes=2) == b"he"
    assert sb.run("python3 -c 'from pkg.mod import X; print(X)'").stdout == "42\n"
    sb.run("mkdir -p out && printf made > out/r.txt")
    assert sb.read_file("out/r.txt") == b"made"
    assert "out/r.txt" in sb.list_files()
    sb.write_files({"a.txt": "overwritten"})
    assert sb.read_file("a.txt") == b"overwritten"


def test_missing_file_and_bad_paths(sb: Sandbox) -> None:
    with pytest.raises(FileNotFoundError):
        sb.read_file("nope.txt")
    for bad in ("/etc/passwd", "../x", "a/../../x", ""):
        with pytest.raises(ConfigError):
            sb.read_file(bad)
        with pytest.raises(ConfigError):
            sb.write_files({bad: "x"})


def test_timeout_kills_and_flags(sb: Sandbox) -> None:
    r = sb.run("echo started; sleep 30; echo never", timeout=0.5)
    assert r.timed_out and not r.ok
    assert r.exit_code == -9
    assert r.stdout == "started\n"
    assert 0.5 <= r.duration_s < 10
    assert sb.run("echo alive").stdout == "alive\n"


def test_duration_is_measured(sb: Sandbox) -> None:
    r = sb.run("sleep 0.3")
    assert r.ok and r.duration_s >= 0.3


def test_output_is_capped_with_flags(sb: Sandbox) -> None:
    n = DEFAULT_OUTPUT_LIMIT * 3
    r = sb.run(f"head -c {n} /dev/zero | tr '\\0' a; head -c 10 /dev/zero | tr '\\0' b >&2")
    assert r.ok
    assert r.stdout == "a" * DEFAULT_OUTPUT_LIMIT and r.stdout_truncated
    assert r.stderr == "b" * 10 and not r.stderr_truncated
    r = sb.run(f"head -c {DEFAULT_OUTPUT_LIMIT} /dev/zero | tr '\\0' c >&2")
    assert len(r.stderr) == DEFAULT_OUTPUT_LIMIT and not r.stderr_truncated


def test_missing_program_is_a_result_not_an_exception(sb: Sandbox) -> None:
    r = sb.run(["no-such-program-xyz"])
    assert r.exit_code == 127 and not r.ok
    assert sb.run("no-such-program-xyz").exit_code == 127


def test_killed_by_signal_gives_negative_exit_code(sb: Sandbox) -> None:
    r = sb.run(["python3", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    assert r.exit_code == -15 and not r.timed_out


def test_reset_wipes_the_work_dir(sb: Sandbox) -> None:
    sb.write_files({"keep.txt": "x"})
    sb.run("echo y > made.txt")
    sb.reset()
    assert sb.list_files() == []
    assert sb.run("ls -A").stdout == ""
    assert sb.run("echo after").stdout == "after\n"


def test_close_is_idempotent_and_use_after_close_raises(sb: Sandbox) -> None:
    sb.close()
    sb.close()
    assert sb.closed
    calls = [
        lambda: sb.run("true"), lambda: sb.run_python("1"), lambda: sb.write_files({"a": "b"}),
        lambda: sb.read_file("a"), lambda: sb.list_files(), sb.reset,
    ]
    for call in calls:
        with pytest.raises(SandboxStateError, match="closed"):
            call()


def test_context_manager_closes(factory) -> None:  # type: ignore[no-untyped-def]
    with factory() as s:
        assert s.run("echo in").stdout == "in\n"
    assert s.closed


def test_bad_arguments_raise_config_error(sb: Sandbox) -> None:
    with pytest.raises(ConfigError):
        sb.run([])
    with pytest.raises(ConfigError):
        sb.run("true", timeout=0)


def test_make_sandbox_rejects_unknown_backend_with_suggestion() -> None:
    with pytest.raises(ConfigError, match="did you mean 'docker'"):
        make_sandbox("dockr")


def test_exec_result_is_frozen() -> None:
    r = ExecResult("a", "", 0, False, 0.1, False, False)
    assert r.ok
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.exit_code = 1  # type: ignore[misc]
    assert not ExecResult("", "", 0, True, 1.0, False, False).ok

"""Hostile code, on every isolating backend (docker and bwrap).

Each test asserts that the attack is contained, that the host is unharmed, and that the
next episode (a fresh sandbox) still works. Attacks are bounded by the sandbox limits
(pids, memory, disk, timeouts), so the whole module runs in about a minute.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
import subprocess
from pathlib import Path

import pytest

from agentgym.sandboxes import Sandbox
from agentgym.sandboxes.base import DEFAULT_OUTPUT_LIMIT

SANDBOX_BACKENDS = ("docker", "bwrap")


def assert_next_episode_works(factory) -> None:  # type: ignore[no-untyped-def]
    fresh = factory()
    r = fresh.run("echo ok; python3 -c 'print(6*7)'")
    assert (r.stdout, r.exit_code) == ("ok\n42\n", 0), r
    fresh.close()


def leftover_pids(sb: Sandbox) -> list[str]:
    """Processes visible in the sandbox besides the runner (PID 1) and this probe."""
    probe = (
        "import os\n"
        "me = os.getpid()\n"
        "print(' '.join(p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me)))"
    )
    r = sb.run_python(probe)
    assert r.ok, r
    return r.stdout.split()


# ----------------------------------------------------------------------------- network
# Isolation is shown without sending a packet anywhere but loopback: the sandbox has no
# interface but lo and no route (so no address outside it can be reached, by construction),
# the host's loopback listeners are not its loopback, and names do not resolve because no
# resolver is reachable. No test here addresses anything outside 127.0.0.0/8 and ::1.
_NET_FACTS = """
import ipaddress, json, socket
ifaces = sorted(line.split(':')[0].strip() for line in open('/proc/net/dev').read().splitlines()[2:])
v4 = [line.split() for line in open('/proc/net/route').read().splitlines()[1:] if line.strip()]
try:
    v6 = [line.split() for line in open('/proc/net/ipv6_route').read().splitlines() if line.strip()]
except FileNotFoundError:
    v6 = []
servers = [line.split()[1] for line in open('/etc/resolv.conf').read().splitlines()
           if line.split()[:1] == ['nameserver'] and len(line.split()) > 1]
print(json.dumps({'ifaces': ifaces, 'v4_routes': v4, 'v6_devices': sorted({r[-1] for r in v6}),
                  'nameservers': servers, 'if_nameindex': [n for _, n in socket.if_nameindex()]}))
"""


def _net_facts(sb: Sandbox) -> dict:  # type: ignore[type-arg]
    import json

    r = sb.run_python(_NET_FACTS)
    assert r.ok, r
    facts: dict = json.loads(r.stdout)  # type: ignore[type-arg]
    return facts


def test_only_loopback_and_no_route_inside(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    facts = _net_facts(sb)
    assert facts["ifaces"] == ["lo"] and facts["if_nameindex"] == ["lo"], facts
    assert facts["v4_routes"] == [], facts  # main table empty: no IPv4 destination has a route
    assert facts["v6_devices"] in ([], ["lo"]), facts  # IPv6: only loopback/local entries on lo
    assert_next_episode_works(factory)


def _host_listeners() -> list[socket.socket]:
    out = []
    for family, addr in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            s = socket.socket(family)
            s.bind((addr, 0))
        except OSError:  # no IPv6 loopback on this host
            continue
        s.listen(8)
        s.setblocking(False)
        out.append(s)
    return out


def test_the_hosts_loopback_listeners_are_unreachable(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    listeners = _host_listeners()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    targets = [(s.getsockname()[0], s.getsockname()[1]) for s in listeners]
    code = (
        "import socket\n"
        f"for host, port in {targets!r}:\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=5).close()\n"
        "        print('CONNECTED', host)\n"
        "    except OSError as e:\n"
        "        print('refused', host, e.errno)\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"s.sendto(b'leak', ('127.0.0.1', {udp.getsockname()[1]})); print('udp sent')\n"
    )
    try:
        r = sb.run_python(code, timeout=20)
        assert "CONNECTED" not in r.stdout and r.stdout.count("refused") == len(targets), r
        assert "udp sent" in r.stdout  # it went to the sandbox's own loopback...
        for s in listeners:
            with pytest.raises(BlockingIOError):
                s.accept()  # ...and nothing reached the host's
        udp.settimeout(0.5)
        with pytest.raises(TimeoutError):
            udp.recvfrom(100)
    finally:
        for s in listeners:
            s.close()
        udp.close()
    assert_next_episode_works(factory)


def test_names_do_not_resolve_and_no_resolver_is_reachable(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    facts = _net_facts(sb)
    # Every configured resolver is on the sandbox's own loopback (none configured: glibc uses
    # 127.0.0.1), so a lookup below can only ever reach the sandbox's empty lo.
    assert all(ipaddress.ip_address(a).is_loopback for a in facts["nameservers"]), facts
    assert facts["v4_routes"] == [] and facts["ifaces"] == ["lo"], facts
    servers = facts["nameservers"] or ["127.0.0.1"]
    code = (
        "import socket\n"
        f"for ns in {servers!r}:\n"
        "    fam = socket.AF_INET6 if ':' in ns else socket.AF_INET\n"
        "    try:\n"
        "        socket.create_connection((ns, 53), timeout=3).close(); print('RESOLVER', ns)\n"
        "    except OSError as e:\n"
        "        print('no resolver', ns, e.errno)\n"
        "for name in ('agentgym-sandbox-probe.invalid', 'localhost.agentgym.invalid'):\n"
        "    try:\n"
        "        print('RESOLVED', name, socket.getaddrinfo(name, 80))\n"
        "    except socket.gaierror as e:\n"
        "        print('unresolved', name, e.errno)\n"
    )
    r = sb.run_python(code, timeout=30)
    assert "RESOLVER" not in r.stdout and r.stdout.count("no resolver") == len(servers), r
    assert "RESOLVED" not in r.stdout and r.stdout.count("unresolved") == 2, r
    assert_next_episode_works(factory)


# ----------------------------------------------------------------------------- host data
def test_host_files_are_invisible(sb: Sandbox, factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    secret = secrets.token_hex(16)
    canary = tmp_path / "canary.txt"
    canary.write_text(secret)
    root_canary = Path("/root") / f"agentgym-canary-{secret[:8]}"
    wrote_root = False
    try:
        root_canary.write_text(secret)
        wrote_root = True
    except OSError:
        pass
    try:
        r = sb.run(
            f"cat {canary}; cat /etc/shadow; ls -a /root; cat {root_canary}; "
            f"grep -rs {secret} /tmp /etc /root /home /var 2>/dev/null; echo done",
            timeout=30,
        )
        assert secret not in r.stdout + r.stderr
        assert root_canary.name not in r.stdout
        shadow = Path("/etc/shadow").read_text() if os.access("/etc/shadow", os.R_OK) else ""
        host_root_hash = next((ln for ln in shadow.splitlines() if ln.startswith("root:")), "")
        if host_root_hash:
            assert host_root_hash not in r.stdout
        assert r.stdout.endswith("done\n")
    finally:
        if wrote_root:
            root_canary.unlink()
    assert_next_episode_works(factory)


def test_host_environment_does_not_leak(factory, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    secret = secrets.token_hex(16)
    monkeypatch.setenv("AGENTGYM_SECRET_CANARY", secret)
    sb = factory()  # created after the variable is set in this (host) process
    r = sb.run("env; cat /proc/1/environ; cat /proc/self/environ")
    assert secret not in r.stdout + r.stderr
    assert "AGENTGYM_SECRET_CANARY" not in r.stdout
    assert_next_episode_works(factory)


# ----------------------------------------------------------------------------- filesystem
def test_writes_outside_workdir_fail(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    targets = ["/etc/evil", "/usr/bin/evil", "/evil", "/opt/agentgym/runner.py", "/root/evil",
               "/var/evil", "/home/evil", "/dev/shm/../evil"]
    script = "; ".join(f"(echo x > {t}) 2>/dev/null && echo WROTE {t}" for t in targets)
    r = sb.run(script + "; echo end")
    assert "WROTE" not in r.stdout, r
    before = sb.run("md5sum /opt/agentgym/runner.py").stdout
    sb.run("rm -f /opt/agentgym/runner.py; chmod 777 /opt/agentgym/runner.py")
    assert sb.run("md5sum /opt/agentgym/runner.py").stdout == before
    assert sb.run("echo ok > /tmp/f && cat /tmp/f").stdout == "ok\n"  # /tmp is writable scratch
    assert_next_episode_works(factory)


def test_docker_socket_is_unreachable(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    code = (
        "import socket\n"
        "for p in ('/var/run/docker.sock', '/run/docker.sock', '/run/containerd/containerd.sock'):\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    try:\n"
        "        s.connect(p); print('CONNECTED', p)\n"
        "    except OSError as e:\n"
        "        print('blocked', p, type(e).__name__)\n"
    )
    r = sb.run_python(code)
    assert "CONNECTED" not in r.stdout and r.stdout.count("blocked") == 3, r
    assert_next_episode_works(factory)


def test_disk_fill_hits_the_quota(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    r = sb.run("dd if=/dev/zero of=big bs=1M count=400 2>&1; dd if=/dev/zero of=/tmp/big "
               "bs=1M count=400 2>&1; du -sm big /tmp/big", timeout=30)
    sizes = [int(line.split()[0]) for line in r.stdout.splitlines()[-2:]]
    assert max(sizes) <= 64, r.stdout  # work dir 64 MiB, /tmp 32 MiB, files 64 MiB
    assert "No space left" in r.stdout or "File too large" in r.stdout
    sb.run("rm -f big")
    assert sb.run("echo fine > small && cat small").stdout == "fine\n"
    assert_next_episode_works(factory)


# ----------------------------------------------------------------------------- resources
def test_fork_bomb_is_bounded(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    r = sb.run("bomb() { bomb | bomb & }; bomb; sleep 3", timeout=4)
    assert r.timed_out or "fork" in r.stderr, r  # the pid limit stopped it
    assert leftover_pids(sb) == []  # the runner killed and reaped the whole tree
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork
    assert_next_episode_works(factory)


def test_memory_bomb_is_bounded(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    single = "b = []\nwhile True: b.append(bytearray(64 << 20))"
    r = sb.run_python(single, timeout=20)
    assert not r.ok and "MemoryError" in r.stderr, r
    # Several processes, each under the per-process cap, together past the total limit:
    # the cgroup (docker, bwrap when cgroups are writable) kills them.
    if getattr(sb, "cgroup_limits", True):
        multi = (
            "import os, time\n"
            "for _ in range(6):\n"
            "    if os.fork() == 0:\n"
            "        b = bytearray(300 << 20)\n"
            "        for i in range(0, len(b), 4096): b[i] = 1\n"
            "        time.sleep(5); os._exit(0)\n"
            "n = sum(os.waitstatus_to_exitcode(os.wait()[1]) == 0 for _ in range(6))\n"
            "print('survivors', n)\n"
        )
        r = sb.run_python(multi, timeout=30)
        survivors = int(r.stdout.split()[-1]) if "survivors" in r.stdout else 0
        assert survivors * 300 < 512, r  # never more than the memory limit really held
    assert sb.run("echo alive").stdout == "alive\n"
    assert_next_episode_works(factory)


def test_cpu_spin_is_killed_at_timeout(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    r = sb.run("python3 -c 'while True: pass' & python3 -c 'while True: pass'", timeout=1)
    assert r.timed_out and r.exit_code == -9
    assert leftover_pids(sb) == []
    assert_next_episode_works(factory)


def test_gigabytes_of_stdout_are_capped(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    r = sb.run("head -c 2G /dev/zero; head -c 1G /dev/zero >&2", timeout=30)
    assert r.stdout_truncated and r.stderr_truncated
    assert len(r.stdout) == DEFAULT_OUTPUT_LIMIT and len(r.stderr) == DEFAULT_OUTPUT_LIMIT
    assert_next_episode_works(factory)


def test_sleeping_children_are_killed_after_the_command(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    r = sb.run("(sleep 300 &); setsid sleep 300 & nohup sleep 300 >/dev/null 2>&1 & "
               "python3 -c 'import os; os.fork() or os.setsid(); __import__(\"time\").sleep(300)' & "
               "echo started", timeout=20)
    assert r.ok and r.stdout == "started\n" and not r.timed_out
    assert leftover_pids(sb) == []
    assert_next_episode_works(factory)


def test_signals_cannot_reach_the_runner_or_the_host(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    victim = subprocess.Popen(["sleep", "60"])  # a host process the sandbox must not reach
    try:
        sb.write_files({"marker": "kept"})  # a runner restart would wipe it
        r = sb.run(f"kill -9 -1; for s in KILL TERM INT HUP QUIT USR1 STOP; do kill -$s 1; done; "
                   f"kill -9 {victim.pid}; kill -9 {os.getpid()}; echo x")
        assert "runner lost" not in r.stderr, r
        assert sb.run("echo still here").stdout == "still here\n"
        assert sb.read_file("marker") == b"kept"  # the same runner survived every signal
        assert victim.poll() is None  # host process untouched
    finally:
        victim.kill()
        victim.wait()
    assert_next_episode_works(factory)


# ----------------------------------------------------------------------------- kernel
def test_proc_and_sys_writes_fail(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    swappiness = Path("/proc/sys/vm/swappiness").read_text()
    targets = ["/proc/sysrq-trigger", "/proc/sys/vm/swappiness", "/proc/sys/kernel/hostname",
               "/sys/kernel/mm/transparent_hugepage/enabled", "/proc/1/oom_score_adj"]
    # 'h' only prints sysrq help to the kernel log, harmless if it were ever accepted
    values = {"/proc/sysrq-trigger": "h", "/proc/sys/vm/swappiness": swappiness.strip(),
              "/proc/1/oom_score_adj": "-1000"}
    script = "; ".join(f"(echo {values.get(t, 'x')} > {t}) 2>/dev/null && echo WROTE {t}"
                       for t in targets)
    r = sb.run(script + "; echo end")
    assert "WROTE" not in r.stdout, r
    assert Path("/proc/sys/vm/swappiness").read_text() == swappiness
    assert_next_episode_works(factory)


_UNSHARE = (  # os.unshare needs Python 3.12; the image has 3.11
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.unshare(%d) != 0:\n"
    "    e = ctypes.get_errno(); raise OSError(e, os.strerror(e))\n"
    "print('UNSHARED')\n"
)


def test_no_privilege_escalation(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    r = sb.run("grep CapEff /proc/self/status; id -u; find / -xdev -perm /6000 -type f 2>/dev/null")
    cap_line, uid, *setuid_files = r.stdout.splitlines()
    assert cap_line.split()[1] == "0000000000000000" and uid == "1000"
    assert setuid_files == []
    probes = {
        "setuid(0)": "import os; os.setuid(0)",
        "raw socket (ping)": "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)",
        "chroot": "import os; os.chroot('/tmp')",
        "unshare user": _UNSHARE % 0x10000000,  # CLONE_NEWUSER
        "unshare mount": _UNSHARE % 0x00020000,  # CLONE_NEWNS
    }
    for name, code in probes.items():
        res = sb.run_python(code)
        assert res.exit_code != 0 and ("PermissionError" in res.stderr or "OSError" in res.stderr), (name, res)
    r = sb.run("unshare -r id -u 2>&1; echo ---; mount -t tmpfs x /tmp 2>&1 || echo refused; "
               "echo ---; cp /bin/sh /tmp/sh && chmod u+s /tmp/sh && /tmp/sh -c 'id -u'")
    unshare_out, mount_out, setuid_out = r.stdout.split("---\n")
    assert "0" not in unshare_out.split(), r  # never root in a new user namespace
    assert "refused" in mount_out, r
    assert setuid_out.strip() == "1000", r  # the setuid copy runs as the same user
    assert_next_episode_works(factory)


# ----------------------------------------------------------------------------- inputs
def test_very_long_command_lines(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    ok = sb.run(["python3", "-c", "import sys; print(len(sys.argv[1]))", "a" * 100_000])
    assert ok.stdout == "100000\n"
    huge = sb.run(["echo", "a" * 10_000_000])  # past the kernel's per-argument limit
    assert not huge.ok and huge.exit_code == 126 and "Argument list too long" in huge.stderr
    many = sb.run(["true", *(["x" * 1000] * 5000)])  # 5 MB of argv in total
    assert not many.ok
    assert sb.run("echo fine").stdout == "fine\n"
    assert_next_episode_works(factory)


def test_binary_garbage_on_stdin(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    garbage = os.urandom(2 << 20) + b"\x10\x11\x00\xff" * 1000  # includes docker's detach keys
    assert sb.run("wc -c", stdin=garbage).stdout.strip() == str(len(garbage))
    r = sb.run_python("input()", stdin=garbage)
    assert not r.timed_out
    assert sb.run("echo fine").stdout == "fine\n"
    assert_next_episode_works(factory)


def test_planted_fifos_and_links_cannot_hang_or_redirect_the_host_helpers(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    sb.run("mkfifo solution.py; mkfifo out.txt; ln -s /dev/zero zero; ln -s /tmp/elsewhere link.py; "
           "mkdir d; for i in $(seq 50); do touch d/f$i; done")
    with pytest.raises(FileNotFoundError, match="not a regular file"):
        sb.read_file("solution.py")  # a FIFO: open() would block the runner forever
    with pytest.raises(FileNotFoundError):
        sb.read_file("zero")
    sb.write_files({"out.txt": "replaced", "link.py": "print(1)\n"})
    assert sb.read_file("out.txt") == b"replaced"
    assert sb.run("test -L link.py || echo plain; test -e /tmp/elsewhere || echo untouched").stdout == "plain\nuntouched\n"
    files = sb.list_files()
    assert "solution.py" not in files and "zero" not in files and len(files) == 52
    assert_next_episode_works(factory)


# ----------------------------------------------------------------------------- symlinks
# The host-side helpers (write_files, read_file, list_files; CodeFix's write_file, read_file,
# edit, apply_patch and list_files tools go through them) resolve paths inside the work dir
# one component at a time with O_NOFOLLOW: a symlink the code planted is never followed.
_PLANT = ("ln -s /tmp d; ln -s /etc/passwd pw; ln -s / rootlink; mkdir -p sub; ln -s /etc sub/etc; "
          "ln -s /opt/agentgym/runner.py sub/runner.py; ln -s . self")


def test_writes_through_planted_symlinks_stay_inside_the_work_dir(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    sb.run(_PLANT)
    for path in ("d/x", "rootlink/tmp/x", "sub/etc/x", "self/d/x"):
        with pytest.raises(PermissionError, match="symlink"):
            sb.write_files({path: "pwned"})
    r = sb.run("ls -a /tmp /etc | grep -x x || echo clean; test -L d && test -L sub/etc && echo links-kept")
    assert r.stdout == "clean\nlinks-kept\n", r
    before = sb.run("md5sum /opt/agentgym/runner.py").stdout
    sb.write_files({"sub/runner.py": "replaced", "pw": "mine"})  # a symlink as the last component is replaced
    assert sb.run("md5sum /opt/agentgym/runner.py").stdout == before
    assert sb.read_file("sub/runner.py") == b"replaced" and sb.read_file("pw") == b"mine"
    assert sb.run("test -L pw || echo plain; head -1 /etc/passwd").stdout.startswith("plain\nroot:")
    assert_next_episode_works(factory)


def test_reads_and_listings_never_follow_planted_symlinks(sb: Sandbox, factory) -> None:  # type: ignore[no-untyped-def]
    sb.run(_PLANT + "; echo visible > sub/own.txt")
    with pytest.raises(FileNotFoundError, match="not a regular file"):
        sb.read_file("pw")  # the link itself: no regular file here
    for path in ("rootlink/etc/passwd", "sub/etc/passwd", "d/anything", "self/sub/own.txt"):
        with pytest.raises(PermissionError, match="symlink"):
            sb.read_file(path)
    for path in ("rootlink", "sub/etc", "d", "self"):
        with pytest.raises(PermissionError, match="symlink"):
            sb.list_files(path)
    assert sb.list_files(".") == ["sub/own.txt"]  # links are neither listed nor descended into
    assert sb.list_files("sub") == ["sub/own.txt"]
    assert sb.read_file("sub/own.txt") == b"visible\n"
    assert_next_episode_works(factory)

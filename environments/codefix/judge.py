"""The hidden-test judge: runs trusted tests against untrusted code, unforgeably.

The model controls everything in the sandbox's work dir and every process its commands
start, so the judge is built so that nothing the model writes can fake a pass:

* The hidden tests never touch the sandbox's disk. At submit the host starts
  ``python3 -I -S -c JUDGE_SOURCE`` and sends the tests, the trusted helpers of the problem
  statement and a fresh random nonce on **stdin**. ``-I`` (isolated mode) keeps the work
  dir off ``sys.path``, so a planted ``json.py`` or ``sitecustomize.py`` cannot shadow the
  judge's imports, and ignores ``PYTHON*`` variables.
* The judge makes itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``) before reading
  stdin, so other processes of the same user cannot read its memory (the nonce, the
  expected values) through ``/proc/PID/mem`` or ptrace.
* The candidate module is imported in a **separate child process**; the trusted test code
  runs in the judge and calls the candidate through a proxy. Arguments go to the child
  pickled (trusted -> untrusted); results come back as tagged JSON that the judge decodes
  into plain values (None, bool, int, float, str, bytes, complex, list, tuple, set, dict),
  so the model cannot return an object that "equals everything" or run code in the judge.
  The child's stdout and stderr go to /dev/null.
* Each call has a timeout (the child is killed and restarted), each test unit has one, and
  the whole run has a deadline; units not reached count as failed.
* The judge prints exactly one result line, ``@@agentgym-judge <nonce> <json>``. The host
  accepts the result only if exactly one line carries the nonce and it parses; anything
  else (no line, two lines, bad JSON) is a failed submission.

:func:`parse_judge_output` is the host side; :func:`judge_payload` builds stdin.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JUDGE_SOURCE", "JudgeReport", "judge_argv", "judge_payload", "parse_judge_output"]

MARKER = "@@agentgym-judge"

# The child: imports the candidate module, then answers calls on its private pipes.
CHILD_SOURCE = r'''
import os, sys, json, pickle, math
rfd, wfd, path, entry = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
def enc(x, depth=0):
    if depth > 200: raise ValueError("result nested too deeply")
    t = type(x)
    if x is None or t in (bool, int, str): return x
    if t is float: return x if math.isfinite(x) else {"F": repr(x)}
    if t is list: return [enc(v, depth + 1) for v in x]
    if t is tuple: return {"t": [enc(v, depth + 1) for v in x]}
    if t in (set, frozenset): return {"s" if t is set else "f": [enc(v, depth + 1) for v in x]}
    if t is dict: return {"d": [[enc(k, depth + 1), enc(v, depth + 1)] for k, v in x.items()]}
    if t is bytes: return {"b": x.decode("latin-1")}
    if t is complex: return {"c": [x.real, x.imag]}
    if isinstance(x, bool): return bool(x)
    if isinstance(x, int): return int(x)
    if isinstance(x, float): return enc(float(x))
    if isinstance(x, str): return str(x)
    return {"o": type(x).__name__ + ": " + repr(x)[:200]}
def send(obj):
    data = json.dumps(obj).encode()
    os.write(wfd, len(data).to_bytes(8, "big"))
    view = memoryview(data)
    while view:
        view = view[os.write(wfd, view):]
def recv():
    head = b""
    while len(head) < 8:
        chunk = os.read(rfd, 8 - len(head))
        if not chunk: sys.exit(0)
        head += chunk
    n, buf = int.from_bytes(head, "big"), b""
    while len(buf) < n:
        chunk = os.read(rfd, n - len(buf))
        if not chunk: sys.exit(0)
        buf += chunk
    return pickle.loads(buf)
sys.path.insert(0, os.getcwd())
try:
    import importlib.util
    spec = importlib.util.spec_from_file_location("solution", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["solution"] = mod
    spec.loader.exec_module(mod)
    fn = getattr(mod, entry)
    send({"ready": True})
except BaseException as e:
    send({"error": "cannot import %s: %s: %s" % (path, type(e).__name__, str(e)[:300])})
    sys.exit(0)
while True:
    args, kwargs = recv()
    try:
        send({"value": enc(fn(*args, **kwargs))})
    except BaseException as e:
        send({"error": "%s: %s" % (type(e).__name__, str(e)[:300])})
'''

# The judge: trusted; runs the hidden test units against the child through a proxy.
JUDGE_SOURCE = r'''
import ctypes, json, os, pickle, select, signal, subprocess, sys, time
try:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0: no /proc/PID/mem, no ptrace
except Exception:
    pass
spec = json.loads(sys.stdin.buffer.read().decode())
NONCE, CALL_T, UNIT_T = spec["nonce"], spec["call_timeout"], spec["unit_timeout"]
DEADLINE = time.monotonic() + spec["deadline"]
MAX_REPLY = 16 << 20
class CandidateError(Exception): pass
class Opaque:
    def __init__(self, text): self.text = text
    def __repr__(self): return "<%s>" % self.text
    def __eq__(self, other): return False
    __hash__ = object.__hash__
def dec(x):
    if isinstance(x, list): return [dec(v) for v in x]
    if isinstance(x, dict):
        (k, v), = x.items()
        if k == "t": return tuple(dec(i) for i in v)
        if k == "s": return set(dec(i) for i in v)
        if k == "f": return frozenset(dec(i) for i in v)
        if k == "d": return {dec(a): dec(b) for a, b in v}
        if k == "b": return v.encode("latin-1")
        if k == "c": return complex(v[0], v[1])
        if k == "F": return float(v)
        if k == "o": return Opaque(str(v))
        raise ValueError("bad tag %r" % k)
    if x is None or type(x) in (bool, int, float, str): return x
    raise ValueError("bad value")
class Child:
    def __init__(self):
        self.proc = None
        self.fatal = None
    def start(self):
        req_r, req_w = os.pipe(); rep_r, rep_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", spec["child"], str(req_r), str(rep_w), spec["path"], spec["entry_point"]],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(req_r, rep_w), start_new_session=True)
        os.close(req_r); os.close(rep_w)
        self.w, self.r = req_w, rep_r
        os.set_blocking(self.w, False)
        try:
            hello = self.read(CALL_T + spec["import_timeout"])
        except BaseException as e:
            hello = {"error": "importing %s failed: %s: %s" % (spec["path"], type(e).__name__, e)}
        if "error" in hello:
            self.fatal = str(hello["error"])
            self.kill()
            raise CandidateError(self.fatal)
    def kill(self):
        if self.proc is not None:
            try: os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError: pass
            self.proc.wait()
            for fd in (self.w, self.r):
                try: os.close(fd)
                except OSError: pass
            self.proc = None
    def read_exact(self, n, end):
        buf = b""
        while len(buf) < n:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise TimeoutError("candidate timed out")
            chunk = os.read(self.r, n - len(buf))
            if not chunk: raise CandidateError("candidate process died")
            buf += chunk
        return buf
    def read(self, timeout):
        end = time.monotonic() + timeout
        n = int.from_bytes(self.read_exact(8, end), "big")
        if n > MAX_REPLY: raise CandidateError("reply too large")
        return json.loads(self.read_exact(n, end).decode())
    def write(self, data, end):
        view = memoryview(data)
        while view:
            left = end - time.monotonic()
            if left <= 0 or not select.select([], [self.w], [], left)[1]:
                raise TimeoutError("candidate does not read its input")
            view = view[os.write(self.w, view):]
    def __call__(self, *args, **kwargs):
        if self.fatal: raise CandidateError(self.fatal)
        if self.proc is None: self.start()
        data = pickle.dumps((args, kwargs))
        try:
            self.write(len(data).to_bytes(8, "big") + data, time.monotonic() + CALL_T)
            reply = self.read(CALL_T)
        except BaseException:
            self.kill()
            raise
        if "error" in reply: raise CandidateError(reply["error"])
        return dec(reply["value"])
class UnitTimeout(BaseException): pass
def on_alarm(signum, frame): raise UnitTimeout("test unit timed out")
signal.signal(signal.SIGALRM, on_alarm)
ns = {"__name__": "__judge__"}
exec(compile(spec["support"], "<problem>", "exec"), ns)
exec(compile(spec["preamble"], "<tests>", "exec"), ns)
child = Child()
ns["candidate"] = child
failures = []
for i, unit in enumerate(spec["units"]):
    if time.monotonic() > DEADLINE:
        failures.append([i, "deadline: judge ran out of time"]); continue
    signal.setitimer(signal.ITIMER_REAL, UNIT_T)
    try:
        exec(compile(unit, "<test %d>" % i, "exec"), ns)
    except BaseException as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if isinstance(e, UnitTimeout): child.kill()
        failures.append([i, ("%s: %s" % (type(e).__name__, e))[:300]])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
child.kill()
n = len(spec["units"])
sys.stdout.write("%s %s %s\n" % ("@@agentgym-judge", NONCE, json.dumps(
    {"total": n, "passed": n - len(failures), "failures": failures})))
sys.stdout.flush()
'''


@dataclass(slots=True)
class JudgeReport:
    """What the judge found. ``valid`` is False when its output could not be trusted."""

    passed: int
    total: int
    failures: list[tuple[int, str]] = field(default_factory=list)  # (unit index, reason)
    valid: bool = True
    problem: str = ""  # why the report is invalid

    @property
    def all_passed(self) -> bool:
        return self.valid and self.total > 0 and self.passed == self.total

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.valid and self.total else 0.0


def judge_argv() -> list[str]:
    # -S: no site-packages scan at startup (the judge and HumanEval code use the stdlib only)
    return ["python3", "-I", "-S", "-c", JUDGE_SOURCE]


def judge_payload(task: dict[str, Any], *, path: str = "solution.py", nonce: str | None = None,
                  call_timeout: float = 3.0, unit_timeout: float = 6.0, deadline: float = 20.0,
                  import_timeout: float = 3.0) -> tuple[bytes, str]:
    """The judge's stdin for one task and a fresh nonce: ``(payload, nonce)``."""
    nonce = nonce or secrets.token_hex(16)
    spec = {"nonce": nonce, "child": CHILD_SOURCE, "path": path,
            "entry_point": task["entry_point"], "support": task["support"],
            "preamble": task["test_preamble"], "units": task["units"],
            "call_timeout": call_timeout, "unit_timeout": unit_timeout, "deadline": deadline,
            "import_timeout": import_timeout}
    return json.dumps(spec).encode(), nonce


def parse_judge_output(stdout: str, nonce: str, expected_total: int) -> JudgeReport:
    """Trust exactly one well-formed result line carrying ``nonce``; anything else is invalid."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith(f"{MARKER} {nonce} ")]
    if len(lines) != 1:
        why = "no result line" if not lines else f"{len(lines)} result lines (tampering?)"
        return JudgeReport(0, expected_total, valid=False, problem=f"judge output rejected: {why}")
    try:
        body = json.loads(lines[0][len(MARKER) + len(nonce) + 2:])
        total, passed = int(body["total"]), int(body["passed"])
        failures = [(int(i), str(r)) for i, r in body["failures"]]
    except (ValueError, KeyError, TypeError) as e:
        return JudgeReport(0, expected_total, valid=False, problem=f"judge output unreadable: {e}")
    if total != expected_total or not 0 <= passed <= total or len(failures) != total - passed:
        return JudgeReport(0, expected_total, valid=False, problem="judge output inconsistent")
    return JudgeReport(passed, total, failures)

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

:func:`parse_judge_output` is the host side; :func:`judge_payload` builds stdin. The judge is
``sandbox_judge.py``, the child ``sandbox_candidate.py`` (both in this package).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["JUDGE_SOURCE", "JudgeReport", "judge_argv", "judge_payload", "parse_judge_output"]

MARKER = "@@agentgym-judge"

# The two programs that run in the sandbox are real modules of this package (linted and
# type-checked like the rest), read here as text: the sandbox gets them as ``-c`` arguments and
# on stdin, never as files it could replace.
CHILD_SOURCE = (Path(__file__).parent / "sandbox_candidate.py").read_text()  # imports the candidate
JUDGE_SOURCE = (Path(__file__).parent / "sandbox_judge.py").read_text()  # trusted; runs the tests


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

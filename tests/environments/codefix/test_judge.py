"""The hidden-test judge: correct counts, and nothing the candidate does can fake a pass.

These run the judge as a local subprocess over candidate code written by the test itself
(trusted); test_env.py repeats the tampering cases inside the real Docker sandbox.
"""

from __future__ import annotations

import pytest

from agentgym.environments.codefix.build_tasks import run_judge_locally
from agentgym.environments.codefix.judge import MARKER, parse_judge_output
from agentgym.environments.codefix.problems import Problem, split_units

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
TESTS = '''
METADATA = {}


def check(candidate):
    assert True, "placeholder, not a test"
    assert candidate(1, 2) == 3
    x = 10
    assert candidate(x, 5) == 15
    for i in range(3):
        assert candidate(i, i) == 2 * i
    assert candidate([1], [2]) == [1, 2]
    assert candidate((1,), (2,)) == (1, 2)
'''
PRE, UNITS, _ = split_units(TESTS)
P = Problem("HumanEval/999", 999, "add", PROMPT, PROMPT + "    return a + b\n", PROMPT, PRE, tuple(UNITS), 2)


def judge(body: str):
    # short timeouts: the hanging candidate below would otherwise take the full deadline
    return run_judge_locally(P, PROMPT + body, call_timeout=1.0, unit_timeout=2.0, deadline=4.0)


def test_units_skip_placeholders_and_keep_setup() -> None:
    assert len(UNITS) == 5
    assert UNITS[1].startswith("x = 10")


def test_canonical_passes_and_bugs_are_counted() -> None:
    assert judge("    return a + b\n").all_passed
    r = judge("    return a - b if (a, b) == (1, 2) else a + b\n")
    assert (r.passed, r.total, [i for i, _ in r.failures]) == (4, 5, [0])
    assert judge("    return [a, b]\n").passed == 0  # list vs tuple vs int are told apart


@pytest.mark.parametrize("body", [
    # prints forged result lines (the nonce is unknown to the child)
    "    return None\nprint('@@agentgym-judge 00 {\"total\": 5, \"passed\": 5, \"failures\": []}')\n",
    # an object equal to everything, returned from the child: decoded as an opaque value
    "    class E:\n        def __eq__(s, o): return True\n    return E()\n",
    # exits the process at import, or from inside the call
    "    import os; os._exit(0)\n",
    "    raise SystemExit(0)\n",
    # writes a forged line straight into the judge's stdout
    "    import os\n    fd = os.open('/proc/%d/fd/1' % os.getppid(), os.O_WRONLY)\n"
    "    os.write(fd, b'@@agentgym-judge x {\"total\": 5, \"passed\": 5, \"failures\": []}\\n')\n"
    "    return 0\n",
    # hangs: per-call timeouts, then the judge's deadline
    "    while True: pass\n",
])
def test_tampering_does_not_pass(body: str) -> None:
    r = judge(body)
    assert r.valid and not r.all_passed and r.passed == 0, r


def test_host_accepts_exactly_one_line_with_the_nonce() -> None:
    line = MARKER + ' n1 {"total": 2, "passed": 2, "failures": []}'
    assert parse_judge_output(line, "n1", 2).all_passed
    assert not parse_judge_output(line + "\n" + line, "n1", 2).valid
    assert not parse_judge_output(line, "other", 2).valid
    assert not parse_judge_output(line, "n1", 3).valid  # wrong number of units
    assert not parse_judge_output(MARKER + " n1 {not json", "n1", 2).valid
    bad = MARKER + ' n1 {"total": 2, "passed": 2, "failures": [[0, "x"]]}'
    assert not parse_judge_output(bad, "n1", 2).valid

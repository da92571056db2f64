"""agentgym.environments.math: Math-v1 (single-turn, verified answers) and MathCalc-v1 (calculator tool).

Importing this package is light: the environment classes load on first use by ``gym.make``.
"""

from __future__ import annotations

from agentgym.environments.math.generators import FAMILIES, LEVELS, Problem, generate
from agentgym.environments.math.verify import Verdict, verify

__all__ = ["FAMILIES", "LEVELS", "Problem", "Verdict", "generate", "verify"]

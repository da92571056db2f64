"""Warm-start teachers of Math-v1 and MathCalc-v1 (``sft.teacher``), declared at registration.

Each is ``factory(oracle, **sft.teacher_kwargs) -> policy``. ``oracle`` is the environment's
perfect policy, and the honest warm start; it takes no options. Other teachers (ones that plant
a defect to study what RL undoes, say) are declared by whoever registers them: see
:func:`agentgym.register` and ``Capabilities.teachers``.
"""

from __future__ import annotations

from agentgym.oracles import StepPolicy

__all__ = ["oracle_teacher"]


def oracle_teacher(oracle: StepPolicy) -> StepPolicy:
    """The oracle itself: every demonstration right."""
    return oracle

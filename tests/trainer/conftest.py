"""Shared by the trainer tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch", reason="the trainer needs the [train] extra")


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core box spinning
    OpenMP threads slow each step down many times over."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def defect_teachers(monkeypatch: pytest.MonkeyPatch) -> None:
    """For one test, Math-v1 and MathCalc-v1 declare the research teachers that plant a defect
    (``defect_teachers.py``) besides their oracle, as an env that offers them would."""
    import dataclasses

    from agentgym import registration
    from tests.trainer.defect_teachers import DEFECT_TEACHERS

    for env_id in ("agentgym/Math-v1", "agentgym/MathCalc-v1"):
        caps = registration.capabilities(env_id)
        monkeypatch.setitem(registration._CAPABILITIES, env_id,
                            dataclasses.replace(caps, teachers={**caps.teachers, **DEFECT_TEACHERS}))

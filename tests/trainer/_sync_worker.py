"""A sharded tiny policy written for a separate server under torchrun (``openai-http``'s sync).

    torchrun --nproc_per_node 2 tests/trainer/_sync_worker.py OUT_DIR

Every rank takes part in the gathers; the checkpoint appears once, written by LOCAL_RANK 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def main(out: str) -> None:
    from agentgym.trainer import distributed as D
    from agentgym.trainer.model import sharding
    from agentgym.trainer.model.gptoss import build_tiny_gptoss
    from agentgym.trainer.rollout.engines.openai_http import write_checkpoint

    torch.set_num_threads(1)
    info = D.init_distributed(D.Layout(backend="gloo", device="cpu", tasks_per_step=2))  # one task per rank
    assert info is not None
    model = sharding.policy_skeleton("tiny", 264, {}, attn_implementation="eager", device="cpu")
    sharding.shard_policy(model, compute_dtype=torch.float32)
    sharding.materialize(model, "cpu")
    D.load_full_state(model, build_tiny_gptoss(264, seed=3).state_dict() if info.is_main else {})
    target = write_checkpoint(D.GatheredWeights(model, torch.bfloat16), Path(out) / "v000001")
    assert target.is_dir()


if __name__ == "__main__":
    from agentgym.trainer.distributed import shutdown

    main(sys.argv[1])
    shutdown()  # after main: the sharded model is garbage by then (see shutdown)

"""Code that runs *inside* vLLM's worker process, for the ``vllm`` engine.

vLLM mixes :class:`AgentgymWorkerExtension` into its ``Worker`` (``worker_extension_cls``,
the hook vLLM provides for RL weight updates), so the trainer process calls these methods by
name with ``LLM.collective_rpc`` and only strings and lists cross the process boundary: the
weights themselves travel as a safetensors checkpoint on disk (``save_pretrained`` layout).

vLLM's own loader reads the checkpoint (name mapping, fused QKV and expert weights, CPU
repacking) and refuses one that does not initialise every parameter; the result is copied
into the live model in place, and a tensor without a counterpart comes back as *missing*,
so a partial sync is an error in the trainer process instead of an engine silently sampling
from stale weights.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AgentgymWorkerExtension"]


class AgentgymWorkerExtension:
    """Methods added to vLLM's ``Worker`` (``self`` is the worker)."""

    def agentgym_reload(self, path: str) -> dict[str, Any]:
        """Load the checkpoint at ``path`` into the running model, in place.

        vLLM's loader builds a fresh copy of the model from ``path`` exactly as at start-up
        (name mapping, fused QKV and experts, CPU prepacking, strict check that every
        parameter was in the checkpoint), then every parameter and buffer is copied into the
        live model's storage, which the attention backends and the MoE kernels reference, and
        the CPU linear layers take the copy's packed GEMM weights. (vLLM 0.32's own in-place
        ``reload_weights`` left the prepacked CPU expert weights and the attention sinks stale:
        measured |dlogp| up to 0.66 after a sync; copying tensors alone left the packed linear
        weights stale.)
        """
        import copy

        import torch
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader import get_model_loader

        worker: Any = self
        live = worker.model_runner.get_model()
        config = copy.copy(worker.vllm_config)
        config.model_config = copy.copy(config.model_config)
        config.model_config.model = path
        config.compilation_config = copy.copy(config.compilation_config)
        config.compilation_config.static_forward_context = {}  # the copy's layers register here
        with set_current_vllm_config(config):
            fresh = get_model_loader(config.load_config).load_model(vllm_config=config,
                                                                    model_config=config.model_config)
        source = {**dict(fresh.named_parameters()), **dict(fresh.named_buffers())}
        copied, mismatched = [], []
        # inference_mode: tensors vLLM created lazily inside its forward passes are inference
        # tensors, which may only be written to in inference mode.
        with torch.inference_mode():
            for name, tensor in [*live.named_parameters(), *live.named_buffers()]:
                src = source.get(name)
                if src is None or src.shape != tensor.shape or src.dtype != tensor.dtype:
                    mismatched.append(name)
                    continue
                tensor.copy_(src)
                copied.append(name)
        # CPU linear layers multiply with a packed copy of their weight (a oneDNN handle or a
        # prepacked tensor held by the ``cpu_linear`` closure), not with ``.weight``: take the
        # fresh model's closures, which hold the new weights.
        fresh_modules = dict(fresh.named_modules())
        for name, module in live.named_modules():
            packed = getattr(fresh_modules.get(name), "cpu_linear", None)
            if packed is not None:
                module.cpu_linear = packed
        del fresh, source, fresh_modules
        return {"copied": copied, "missing": mismatched}

    def agentgym_capture_routing(self, on: bool) -> int:
        """Start (``on``) or stop recording each MoE router's top-k experts; returns the layer count.

        GPT-OSS's ``MLPBlock.router`` returns the router logits ``(tokens, experts)`` of every
        forward step; the top ``num_experts_per_tok`` are the experts vLLM routes to.
        """
        worker: Any = self
        state = worker.__dict__.setdefault("_agentgym_routing", {"handles": [], "rows": {}})
        for h in state["handles"]:
            h.remove()
        state["handles"], state["rows"] = [], {}
        if not on:
            return 0
        model = worker.model_runner.get_model()
        k = int(worker.model_runner.model_config.hf_config.num_experts_per_tok)
        layers = [m for name, m in model.named_modules() if name.endswith("mlp.router")]
        for i, module in enumerate(layers):
            def hook(_m: Any, _inp: Any, out: Any, i: int = i) -> None:
                logits = out[0] if isinstance(out, tuple) else out
                state["rows"].setdefault(i, []).extend(logits.float().topk(k, dim=-1).indices.tolist())
            state["handles"].append(module.register_forward_hook(hook))
        return len(layers)

    def agentgym_take_routing(self) -> list[list[list[int]]]:
        """The experts recorded since the last call, per layer: ``[layer][token][k]``."""
        worker: Any = self
        state = worker.__dict__.setdefault("_agentgym_routing", {"handles": [], "rows": {}})
        rows = state["rows"]
        state["rows"] = {}
        return [rows.get(i, []) for i in range(len(state["handles"]))]

    def agentgym_parameter_names(self) -> list[str]:
        """The engine model's parameter names (its own, fused layout)."""
        worker: Any = self
        return [name for name, _ in worker.model_runner.get_model().named_parameters()]

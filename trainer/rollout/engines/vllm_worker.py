"""Code that runs *inside* vLLM's worker, for the ``vllm`` engine (and ``vllm serve``).

vLLM mixes :class:`AgentgymWorkerExtension` into its ``Worker`` (``worker_extension_cls``, the
hook vLLM provides for RL weight updates); the trainer calls these methods by name with
``LLM.collective_rpc``. Under ``external_launcher`` the worker lives in the trainer's own
process and the tensors are passed by reference; otherwise they travel through vLLM's RPC
(msgpack buffers over a local socket): never through disk.

**Streaming weight sync** (:meth:`agentgym_sync_begin`, :meth:`agentgym_sync_bucket` per
bucket of ``(name, tensor)`` in the trainer's (Hugging Face) names, :meth:`agentgym_sync_finish`):

* modules whose weights vLLM's GPT-OSS ``load_weights`` hands to a ``weight_loader`` (the fused
  QKV / output / router / embedding / head linears, the norms) go through vLLM's layer-wise
  reload: each is restored to its checkpoint shape on the meta device, buffers its weights
  until complete, then is materialised, loaded and post-processed (CPU: GEMM prepacking, a new
  ``cpu_linear``) and copied back into the live storage;
* modules whose weights ``load_weights`` copies directly (the MoE experts and their biases, the
  attention sinks) stay live and receive the new values in place; each MoE layer is then
  post-processed again from those values (CPU: prepacked again; vLLM 0.32 only does so on the
  first load, so its own ``reload_weights`` left the CPU experts in the raw layout: measured
  |dlogp| 0.93; the sinks stayed stale: 0.05);
* every engine parameter must receive a weight, else its name comes back as *missing* and the
  trainer raises instead of sampling from stale weights.

Memory: one bucket at a time plus, for a layer-wise module, its weights until the module is
complete (a few MB for the tiny model, one decoder layer's attention for GPT-OSS-20B); never a
second copy of the model. :meth:`agentgym_reload` streams a safetensors folder through the same
path (``vllm serve``, which cannot share the trainer's memory).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["DIRECT_PARAMETERS", "AgentgymWorkerExtension"]

# Parameters vLLM's GPT-OSS load_weights fills with ``param.copy_`` instead of a weight_loader:
# they must stay live during a streamed sync (a layer-wise reload would put them on the meta
# device, where the copies vanish).
DIRECT_PARAMETERS = frozenset({"w13_weight", "w2_weight", "w13_bias", "w2_bias", "sinks"})


class AgentgymWorkerExtension:
    """Methods added to vLLM's ``Worker`` (``self`` is the worker)."""

    # ------------------------------------------------------------------ streaming sync
    def agentgym_sync_begin(self) -> int:
        """Open a weight sync (see the module doc); returns the number of engine parameters."""
        import torch
        from vllm.model_executor.model_loader.reload import layerwise as lw
        from vllm.model_executor.model_loader.reload.meta import restore_layer_on_meta
        from vllm.model_executor.model_loader.reload.utils import get_layer_params_buffers

        worker: Any = self
        model = worker.model_runner.get_model()
        state = _state(worker)
        if state.get("open"):  # a sync that failed half-way: put every module back first
            self.agentgym_sync_finish()
        model._original_do_torchao_reload = getattr(model, "_do_torchao_reload", False)
        model._do_torchao_reload = False
        with torch.no_grad():
            for layer in model.modules():
                if not layer._parameters or DIRECT_PARAMETERS & set(layer._parameters):
                    continue  # nothing to load (rotary caches), or stays live: load_weights copies into it
                info = lw.get_layerwise_info(layer)
                if info.can_load():
                    continue
                info.kernel_tensors = get_layer_params_buffers(layer)
                info.kernel_non_persistent_buffers = set(layer._non_persistent_buffers_set)
                restore_layer_on_meta(layer, info)
                lw.initialize_online_processing(layer)
        state.update(open=True, loaded=set(), moe=set())
        return sum(1 for _ in model.named_parameters())

    def agentgym_sync_bucket(self, items: list[tuple[str, Any]]) -> int:
        """Load one bucket of ``(name, full tensor)`` (Hugging Face names, full shapes: each
        tensor-parallel rank keeps its slice); returns the number of engine tensors it filled."""
        import torch

        worker: Any = self
        state = _state(worker)
        if not state.get("open"):
            raise RuntimeError("agentgym_sync_bucket before agentgym_sync_begin")
        model = worker.model_runner.get_model()
        # GPT-OSS's loader zeroes the w2 bias it is given on tensor-parallel ranks > 0, in place:
        # hand it a copy, never the trainer's tensor
        owned = ((n, t.clone() if n.endswith("bias") else t) for n, t in items)
        with torch.no_grad():
            loaded = set(model.load_weights(owned))
        state["loaded"] |= loaded
        state["moe"] |= {n.rsplit(".", 1)[0] for n in loaded if n.rsplit(".", 1)[-1] in ("w13_weight", "w2_weight")}
        return len(loaded)

    def agentgym_sync_shared(self, segment: str, specs: list[tuple[str, str, list[int], int, int]]) -> int:
        """:meth:`agentgym_sync_bucket` for a bucket in the shared-memory ``segment``: ``specs`` are
        ``(name, dtype, shape, offset, bytes)``. The tensors are copied out (a module's weights may
        wait for the next bucket), so the segment can go as soon as this returns."""
        from multiprocessing import resource_tracker
        from multiprocessing.shared_memory import SharedMemory

        import torch

        # the trainer owns the segment: opening it must not register it with the resource tracker,
        # which vLLM's processes may share with the trainer (Python 3.11 has no track=False)
        register = resource_tracker.register
        resource_tracker.register = lambda *args, **kwargs: None
        try:
            shm = SharedMemory(name=segment)
        finally:
            resource_tracker.register = register
        try:
            items = []
            for name, dtype, shape, offset, n in specs:
                dt = getattr(torch, dtype)
                if n:
                    raw = torch.frombuffer(shm.buf, dtype=torch.uint8, count=n, offset=offset)
                    items.append((name, raw.clone().view(dt).reshape(shape)))
                    del raw
                else:
                    items.append((name, torch.empty(shape, dtype=dt)))
        finally:
            shm.close()
        return self.agentgym_sync_bucket(items)

    def agentgym_sync_finish(self) -> dict[str, Any]:
        """Close the sync: post-process what was loaded, put back what was not; returns
        ``{"loaded": n, "missing": [engine parameter names that received no weight]}``."""
        import torch
        from vllm.model_executor.model_loader.reload.layerwise import finalize_layerwise_reload
        from vllm.platforms import current_platform

        worker: Any = self
        state = _state(worker)
        model = worker.model_runner.get_model()
        with torch.no_grad():
            finalize_layerwise_reload(model, worker.model_runner.model_config)
            modules = dict(model.named_modules())
            for name in sorted(state.get("moe", ())):
                layer = modules[name]
                method = layer.quant_method
                if current_platform.is_cpu():
                    # CPU: rebuild the kernel so that the experts are prepacked again from the raw
                    # values just loaded (vLLM's weight-update path skips the prepacking)
                    method.moe_kernel = None
                method.process_weights_after_loading(layer)
        loaded = state.get("loaded", set())
        missing = sorted({n for n, _ in model.named_parameters()} - loaded)
        state.update(open=False, loaded=set(), moe=set())
        return {"loaded": len(loaded), "missing": missing}

    def agentgym_reload(self, path: str, bucket_bytes: int = 1 << 28) -> dict[str, Any]:
        """Stream the safetensors files of the folder ``path`` through the sync above (one
        bucket of at most ``bucket_bytes`` in memory at a time); returns :meth:`agentgym_sync_finish`'s
        report, with ``missing`` also naming checkpoints that lack engine tensors."""
        from pathlib import Path

        from safetensors import safe_open

        files = sorted(Path(path).glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no *.safetensors under {path}")
        self.agentgym_sync_begin()
        try:
            for bucket in _buckets(((name, f) for f in files for name in _keys(f)), bucket_bytes, safe_open):
                self.agentgym_sync_bucket(bucket)
        finally:
            report = self.agentgym_sync_finish()
        return report

    # ------------------------------------------------------------------ routing
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


def _state(worker: Any) -> dict[str, Any]:
    return worker.__dict__.setdefault("_agentgym_sync", {})  # type: ignore[no-any-return]


def _keys(file: Any) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as f:
        return list(f.keys())


def _buckets(names: Iterable[tuple[str, Any]], bucket_bytes: int, safe_open: Any) -> Iterable[list[tuple[str, Any]]]:
    """``(name, file)`` -> lists of ``(name, tensor)`` of at most ``bucket_bytes`` (one tensor
    alone may be larger), read lazily from the files."""
    bucket: list[tuple[str, Any]] = []
    size = 0
    handles: dict[str, Any] = {}
    for name, file in names:
        f = handles.get(str(file))
        if f is None:
            f = handles[str(file)] = safe_open(str(file), framework="pt")
        t = f.get_tensor(name)
        if bucket and size + t.numel() * t.element_size() > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += t.numel() * t.element_size()
    if bucket:
        yield bucket

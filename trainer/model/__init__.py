"""The policy: GPT-OSS, sink-aware attention, log-probs, MXFP4, routing replay, LoRA, sharding, model files.

``gptoss`` (building and loading the policy, the value head), ``attention`` (sink-aware
backends), ``logprobs`` (the one forward pass for per-token log-probs), ``mxfp4`` (the
checkpoint format of GPT-OSS's experts), ``routing`` (MoE routing capture and replay), ``lora``
(adapters), ``sharding`` (FSDP2), ``weights`` (streaming tensors) and ``files`` (model folders
on disk). Imports ``algo`` at most (and the leaves).
"""

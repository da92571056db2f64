"""The pure math of the trainer: functions of tensors and plain values, never the run's config or learner.

``ppo`` (clipped surrogate, value loss, GAE and group advantages, KL estimators, reward
normalisation, adaptive KL, the placebo shuffle), ``correction`` (rollout-correction weights
and mismatch diagnostics; ``correction_modes``: the mode names, free of torch), ``episode``
(one collected episode: the env's record and the loop's log-probs, versions and faults), ``batch``
(episodes -> padded token tensors, micro-batches), ``imitation`` (which episodes the
imitation baselines learn from), ``optim`` (learning-rate schedule, AdamW moments, step size).
Imports no other wing of the trainer.
"""

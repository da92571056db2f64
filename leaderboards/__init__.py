"""agentgym.leaderboards: submissions anyone can verify by replaying them.

* ``suite``: versioned suites (``suites/*.yaml``): env ids, tasks, trials, budgets, sampling;
* ``policies`` / ``engine_policy``: what ``agentgym-eval`` runs (scripted, hf, vllm, openai-http, ...);
* ``evaluate``: ``agentgym-eval`` itself (concurrent, resumable); ``submission``: the file format,
  read within the bounds of ``limits`` (a submission is hostile input);
* ``replay`` / ``verify``: ``agentgym leaderboard verify``; ``provenance``: ``verify --model``
  (were the actions sampled from these weights?); ``stats``: intervals and pass^k;
* ``validate``: ``agentgym validate ENV_ID``; ``board`` / ``transcript`` / ``site/``: the board;
* ``baselines``: regenerates the committed baseline submissions; ``cli``: the command lines.

Importing this package imports nothing heavy (no torch): model policies import it when built.
"""

__all__: list[str] = []

"""CodeFix-v1: fix injected bugs in HumanEval functions inside a sandbox (see env.py).

Modules: env (the environment), workspace (tools and budgets), judge (hidden tests),
tasks (the shipped task file), problems/mutations/build_tasks (how it was built),
patch (unified diffs), oracle (reference policies).
"""

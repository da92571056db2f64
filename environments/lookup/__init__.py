"""``agentgym/Lookup-v1``: follow a chain of dependent look-ups through a flaky service."""

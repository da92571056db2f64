"""agentgym.sandboxes"""

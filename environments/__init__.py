"""agentgym.environments"""

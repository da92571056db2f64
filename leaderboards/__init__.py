"""agentgym.leaderboards"""

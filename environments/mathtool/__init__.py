"""MathTool-v0: Math-v0 plus a python tool that runs in a sandbox (see env.py)."""

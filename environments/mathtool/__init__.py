"""MathTool-v1: Math-v1 plus a python tool that runs in a sandbox (see env.py)."""

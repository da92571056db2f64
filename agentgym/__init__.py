"""agentgym: Gymnasium-style multi-turn tool environments for agentic RL, token in / token out.

    import gymnasium as gym
    import agentgym

    env = gym.make("agentgym/Math-v1")
    obs, info = env.reset(seed=0)

Importing agentgym registers the built-in environments and imports neither torch nor any
environment module: ``gym.make`` imports the one it needs.
"""

from __future__ import annotations

from agentgym.chat import ChatWrapper
from agentgym.env import Task, ToolEnv
from agentgym.errors import (
    ActionTypeError,
    AgentGymError,
    CheckpointError,
    ConfigError,
    DatasetError,
    EnvStateError,
    InfraError,
    NonFiniteError,
    SandboxError,
    SandboxStateError,
    SandboxUnavailable,
    ServiceError,
    SubmissionError,
    TokenizerError,
    TrainerError,
)
from agentgym.harmony import HarmonyCodec, Message, ParsedAction, ToolCall
from agentgym.registration import Capabilities, _register_builtin, capabilities, register, registered_ids
from agentgym.tokenizers import ByteTokenizer, HFTokenizer, Tokenizer, as_tokenizer
from agentgym.tools import Tool, ToolResult
from agentgym.trajectory import Trajectory, Turn, read_jsonl, write_jsonl
from agentgym.vector import EnvPool, StepResult
from agentgym.wrappers import TextWrapper

__version__ = "0.1.0"

__all__ = [
    "ActionTypeError",
    "AgentGymError",
    "ByteTokenizer",
    "Capabilities",
    "ChatWrapper",
    "CheckpointError",
    "ConfigError",
    "DatasetError",
    "EnvPool",
    "EnvStateError",
    "HFTokenizer",
    "HarmonyCodec",
    "InfraError",
    "Message",
    "NonFiniteError",
    "ParsedAction",
    "SandboxError",
    "SandboxStateError",
    "SandboxUnavailable",
    "ServiceError",
    "StepResult",
    "SubmissionError",
    "Task",
    "TextWrapper",
    "TokenizerError",
    "Tool",
    "ToolCall",
    "ToolEnv",
    "ToolResult",
    "Tokenizer",
    "TrainerError",
    "Trajectory",
    "Turn",
    "__version__",
    "as_tokenizer",
    "capabilities",
    "read_jsonl",
    "register",
    "registered_ids",
    "write_jsonl",
]

_register_builtin()

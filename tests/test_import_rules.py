"""The package's "never" arrows, checked on every import statement, lazy ones included.

    core (agentgym/*.py, agentgym/chat) -/-> trainer, environments, sandboxes, serving
    serving (agentgym/serving)          -/-> environments, sandboxes, leaderboards, trainer
                                             (but agentgym/serving/model_server.py may import the trainer)
    sandboxes    -/-> environments, trainer, serving
    trainer      -/-> environments, serving  (it reaches an env through gym.make and its declared capabilities)
    environments -/-> trainer, serving

Each top-level folder maps into the ``agentgym`` namespace (pyproject's package-dir), so a file's
layer is its folder (``agentgym/serving`` is a layer of its own inside ``agentgym/``) and an
import's layer is the second part of its module name. Entry-point
strings (``"agentgym.environments.math.env:MathEnv"`` in the registry) are the sanctioned lazy
link and are not imports; ``importlib.import_module("literal")`` is checked like an import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"agentgym": "core", "environments": "environments", "trainer": "trainer", "sandboxes": "sandboxes",
           "leaderboards": "leaderboards"}
LAYERS = {"trainer", "environments", "sandboxes", "leaderboards", "serving"}  # the rest of agentgym.* is core
NEVER: dict[str, set[str]] = {
    "core": {"trainer", "environments", "sandboxes", "serving"},
    "serving": {"environments", "sandboxes", "leaderboards", "trainer"},
    "sandboxes": {"environments", "trainer", "serving"},
    "trainer": {"environments", "serving"},
    "environments": {"trainer", "serving"},
}
# The model server is the trainer's hf engine behind HTTP: the one serving module that may import it
# (nothing imports it until `agentgym serve model` runs).
ALLOWED: dict[str, set[str]] = {"agentgym/serving/model_server.py": {"trainer"}}


def _module_of(root: Path, path: Path) -> list[str]:
    """``trainer/engines/hf.py`` -> ["agentgym", "trainer", "engines", "hf"]."""
    rel = path.relative_to(root).with_suffix("").parts
    head = [] if rel[0] == "agentgym" else ["agentgym"]
    return head + list(rel[:-1] if rel[-1] == "__init__" else rel)


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "agentgym":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"


def _imports(tree: ast.AST, here: list[str], is_package: bool) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.append((node.lineno, node.module or ""))
            else:  # from ..x import y: relative to the importing module's package
                base = here if is_package else here[:-1]
                base = base[:len(base) - (node.level - 1)]
                found.append((node.lineno, ".".join(base + ([node.module] if node.module else []))))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
            found.append((node.lineno, node.args[0].value))
    return found


def violations(root: Path) -> list[str]:
    """``path:line: layer -> module`` for every import under ``root`` that crosses a "never" arrow."""
    out = []
    for folder, layer in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            here = _module_of(root, path)
            rel = path.relative_to(root).as_posix()
            own = _layer_of(".".join(here)) if layer == "core" else layer  # agentgym/serving/...: serving
            for line, module in _imports(ast.parse(path.read_text()), here, path.name == "__init__.py"):
                target = _layer_of(module)
                if target in NEVER.get(own, set()) and target not in ALLOWED.get(rel, set()):
                    out.append(f"{rel}:{line}: {own} -> {module}")
    return sorted(out)


def test_no_import_crosses_a_never_arrow() -> None:
    found = violations(ROOT)
    assert not found, ("imports against the layering (move the code, or reach it through the registry):\n"
                       + "\n".join(found))


def test_the_check_catches_lazy_relative_and_string_imports(tmp_path: Path) -> None:
    files = {
        "agentgym/cli.py": "def f():\n    from agentgym.sandboxes.cli import main\n",
        "agentgym/chat/x.py": "from ..trainer import sft\n",
        "trainer/sft.py": "import importlib\nimportlib.import_module('agentgym.environments.math.oracle')\n",
        "environments/math/env.py": "import agentgym.trainer.config\nfrom agentgym.oracles import get_oracle\n",
        "sandboxes/base.py": "from agentgym.errors import SandboxError\n",
        "leaderboards/cli.py": "from agentgym.trainer import sft\n",  # leaderboards may use any layer
        "agentgym/env.py": "def f():\n    from agentgym.serving import env_client\n",
        "agentgym/serving/env_server.py": "from agentgym.environments.math import env\nfrom agentgym import errors\n",
        "agentgym/serving/chat_server.py": "from agentgym.trainer.rollout.engines import hf\n",
        "agentgym/serving/model_server.py": "from agentgym.trainer.rollout.engines import hf\n",  # the one allowed
        "trainer/engines/openai_http.py": "from agentgym.serving import model_server\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert violations(tmp_path) == [
        "agentgym/chat/x.py:1: core -> agentgym.trainer",
        "agentgym/cli.py:2: core -> agentgym.sandboxes.cli",
        "agentgym/env.py:2: core -> agentgym.serving",
        "agentgym/serving/chat_server.py:1: serving -> agentgym.trainer.rollout.engines",
        "agentgym/serving/env_server.py:1: serving -> agentgym.environments.math",
        "environments/math/env.py:1: environments -> agentgym.trainer.config",
        "trainer/engines/openai_http.py:1: trainer -> agentgym.serving",
        "trainer/sft.py:2: trainer -> agentgym.environments.math.oracle",
    ]

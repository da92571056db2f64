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

Inside the trainer, wings that import one way (every import counts: at the top, inside a
function, under ``TYPE_CHECKING``):

    leaves < algo < model < rollout < run

A module may import its own wing and the wings to its left, never to its right. Leaves
(``trainer/{metrics,health,plots,stats,curriculum,distributed,memtrack,engine_names}.py``) import only leaves;
``algo`` only leaves that import nothing of the trainer. No cycle among trainer modules, and no
trainer module imported inside a function, except by the engine factory
(``trainer/rollout/engines/factory.py``, which imports an engine when it is asked for).
``scripts/draw_trainer.py`` draws the same scan.
"""

from __future__ import annotations

import ast
import shutil
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
    """``trainer/rollout/engines/hf.py`` -> ["agentgym", "trainer", "rollout", "engines", "hf"]."""
    rel = path.relative_to(root).with_suffix("").parts
    head = [] if rel[0] == "agentgym" else ["agentgym"]
    return head + list(rel[:-1] if rel[-1] == "__init__" else rel)


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "agentgym":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"


def _from_module(node: ast.ImportFrom, here: list[str], is_package: bool) -> str:
    """The module a ``from ... import`` reads, absolute (``from ..x import y``: relative to the
    importing module's package)."""
    if node.level == 0:
        return node.module or ""
    base = here if is_package else here[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(tree: ast.AST, here: list[str], is_package: bool) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, _from_module(node, here, is_package)))
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
        "trainer/rollout/engines/openai_http.py": "from agentgym.serving import model_server\n",
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
        "trainer/rollout/engines/openai_http.py:1: trainer -> agentgym.serving",
        "trainer/sft.py:2: trainer -> agentgym.environments.math.oracle",
    ]


# ---------------------------------------------------------------------------- the trainer's wings

WINGS = ("leaves", "algo", "model", "rollout", "run")  # each imports only itself and those before it
LEAVES = {"metrics", "health", "plots", "stats", "curriculum", "distributed", "memtrack", "engine_names"}
FACTORY = "agentgym.trainer.rollout.engines.factory"  # the one module that imports trainer modules lazily
TRAINER = "agentgym.trainer"


def wing_of(module: str) -> str:
    """``agentgym.trainer.model.files`` -> "model"; a top-level module is a leaf or the run."""
    parts = module.split(".")[2:]
    if parts and parts[0] in WINGS[1:-1]:
        return parts[0]
    return "leaves" if len(parts) == 1 and parts[0] in LEAVES else "run"


def trainer_imports(root: Path) -> dict[str, list[tuple[int, str, bool]]]:
    """Every trainer module under ``root/trainer`` -> the trainer modules it imports, as
    ``(line, module, inside a function)``. ``from .pkg import mod`` names the submodule;
    ``importlib.import_module("literal")`` counts as an import."""
    paths = {".".join(_module_of(root, p)): p for p in sorted((root / "trainer").rglob("*.py"))}
    graph: dict[str, list[tuple[int, str, bool]]] = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text())
        lazy: set[int] = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lazy |= {id(n) for n in ast.walk(fn)}
        edges: list[tuple[int, str, bool]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _from_module(node, module.split("."), path.name == "__init__.py")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)
                  and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
                targets = [node.args[0].value]
            else:
                continue
            for target in dict.fromkeys(targets):
                if target in paths and target != TRAINER:
                    edges.append((node.lineno, target, id(node) in lazy))
        graph[module] = edges
    return graph


def wing_violations(root: Path) -> list[str]:
    """``path:line: wing -> module (wing)`` for every trainer import against the wing order,
    every trainer module imported inside a function (the factory aside), and every cycle."""
    graph = trainer_imports(root)
    paths = {".".join(_module_of(root, p)): p.relative_to(root).as_posix()
             for p in (root / "trainer").rglob("*.py")}
    impure = {m for m, edges in graph.items() if wing_of(m) == "leaves" and edges}
    out = []
    for module, edges in graph.items():
        own = wing_of(module)
        for line, target, lazy in edges:
            wing = wing_of(target)
            where = f"{paths[module]}:{line}: {own} -> {target} ({wing})"
            if WINGS.index(wing) > WINGS.index(own):
                out.append(where + ": against the wing order " + " < ".join(WINGS))
            elif own == "algo" and target in impure:
                out.append(where + ": algo imports only leaves that import nothing of the trainer")
            if lazy and module != FACTORY:
                out.append(where + ": a trainer module imported inside a function; import it at the top "
                           "(a cycle it dodged is still a cycle: move the code to its wing)")
    out += [f"cycle: {' -> '.join(c)}" for c in cycles(graph)]
    return sorted(out)


def cycles(graph: dict[str, list[tuple[int, str, bool]]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules that import each other (lazy imports included)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for _, w, _ in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or any(t == v for _, t, _ in graph.get(v, [])):
                found.append(_loop(graph, sorted(group)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _loop(graph: dict[str, list[tuple[int, str, bool]]], group: list[str]) -> list[str]:
    """A closed path through ``group`` from its first module (breadth first, shortest)."""
    start, inside = group[0], set(group)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for _, w, _ in graph[v]:
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w in inside and w not in prev and w != start:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start, start]


def test_trainer_wings_import_one_way_without_cycles() -> None:
    found = wing_violations(ROOT)
    assert not found, "trainer imports against its wings (see this file's docstring):\n" + "\n".join(found)


def test_every_trainer_module_is_in_a_wing_the_docstring_names() -> None:
    graph = trainer_imports(ROOT)
    assert {wing_of(m) for m in graph} == set(WINGS)
    top = {m.split(".")[2] for m in graph if m != TRAINER}
    assert LEAVES <= top, f"leaves named here but missing from trainer/: {sorted(LEAVES - top)}"


def test_the_wing_check_catches_a_planted_violation_and_a_lazy_cycle(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "trainer", tmp_path / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    assert wing_violations(tmp_path) == []
    ppo = tmp_path / "trainer" / "algo" / "ppo.py"
    ppo.write_text(ppo.read_text() + "\nfrom ..model import gptoss\n")
    n = len(ppo.read_text().splitlines())
    (tmp_path / "trainer" / "health.py").write_text(
        (ROOT / "trainer" / "health.py").read_text() + "\n\ndef _report():\n    from . import metrics\n")
    episode = tmp_path / "trainer" / "algo" / "episode.py"
    episode.write_text("import importlib\nimportlib.import_module('agentgym.trainer.rollout.collector')\n"
                       + episode.read_text())
    metrics = tmp_path / "trainer" / "metrics.py"
    metrics.write_text("from .health import KL_UNWATCHED\n" + metrics.read_text())
    found = wing_violations(tmp_path)
    assert f"trainer/algo/ppo.py:{n}: algo -> agentgym.trainer.model.gptoss (model): against the wing order " \
           "leaves < algo < model < rollout < run" in found
    assert any(f.startswith("trainer/health.py:") and "-> agentgym.trainer.metrics (leaves): a trainer module "
               "imported inside a function" in f for f in found)
    assert "cycle: agentgym.trainer.health -> agentgym.trainer.metrics -> agentgym.trainer.health" in found
    assert ("trainer/algo/episode.py:2: algo -> agentgym.trainer.rollout.collector (rollout): against the wing "
            "order leaves < algo < model < rollout < run") in found
    # rollout.collector imports algo.episode: the string import closes a loop as well
    assert any(f.startswith("cycle: ") and "agentgym.trainer.algo.episode" in f and "rollout.collector" in f
               for f in found)
    # metrics now imports the trainer, so algo's import of it is refused too
    assert any(f.startswith("trainer/algo/") and "-> agentgym.trainer.metrics (leaves): algo imports only" in f
               for f in found)


# ------------------------------------------------------------------ narrow interfaces
# The wings take the small configs they read, never the run's: no ``TrainConfig`` or ``Learner``
# in their code, and no ``param.<section>.<field>`` read of a whole run config handed in as a
# parameter (``cfg.env.id``, ``cfg.rollout.engine``): the caller passes ``cfg.env`` instead.

def _sections() -> dict[str, set[str]]:
    import dataclasses

    from agentgym.trainer.config import TrainConfig

    return {f.name: {g.name for g in dataclasses.fields(f.default_factory())}  # type: ignore[misc]
            for f in dataclasses.fields(TrainConfig) if dataclasses.is_dataclass(f.default_factory)}  # type: ignore[arg-type]


def interface_violations(root: Path) -> list[str]:
    """``path: function: what`` for each wing function that takes or reads the run's config."""
    sections, found = _sections(), []
    for wing in ("algo", "model", "rollout"):
        for path in sorted((root / "trainer" / wing).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Name) and node.id in ("TrainConfig", "Learner"):
                    found.append(f"{rel}: names {node.id}")
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                params = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)} - {"self", "cls"}
                for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                    if a.annotation is not None and any(w in ast.unparse(a.annotation) for w in ("TrainConfig", "Learner")):
                        found.append(f"{rel}: {node.name}({a.arg}: {ast.unparse(a.annotation)})")
                read: dict[str, set[str]] = {}  # parameter -> the run-config sections read off it
                for sub in ast.walk(node):
                    if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                            and isinstance(sub.value.value, ast.Name) and sub.value.value.id in params
                            and sub.attr in sections.get(sub.value.attr, ())):
                        found.append(f"{rel}: {node.name} reads {ast.unparse(sub)}")
                    if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in params \
                            and sub.attr in sections:
                        read.setdefault(sub.value.id, set()).add(sub.attr)
                found += [f"{rel}: {node.name} reads {', '.join(sorted(f'{p}.{s}' for s in got))}"
                          for p, got in read.items() if len(got) > 1]  # a whole run config, taken apart
    return sorted(set(found))


def test_the_wings_take_their_own_small_configs() -> None:
    assert interface_violations(ROOT) == []


def test_the_interface_check_catches_a_run_config_in_a_wing(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "trainer", tmp_path / "trainer", ignore=shutil.ignore_patterns("__pycache__"))
    assert interface_violations(tmp_path) == []
    (tmp_path / "trainer" / "rollout" / "planted.py").write_text(
        "from typing import Any\n\n\ndef collect(cfg: Any) -> int:\n    return cfg.env.max_turns\n\n\n"
        "def step(learner: 'Learner') -> None:\n    pass\n")
    (tmp_path / "trainer" / "algo" / "planted.py").write_text(
        "def loss(model, ppo):\n    return model.model.layers, ppo.clip_eps\n\n\n"
        "def build(cfg):\n    e, sc = cfg.env, cfg.sft\n    return e, sc\n")  # an HF model's .model: not a config
    assert interface_violations(tmp_path) == [
        "trainer/algo/planted.py: build reads cfg.env, cfg.sft",
        "trainer/rollout/planted.py: collect reads cfg.env.max_turns",
        "trainer/rollout/planted.py: step(learner: 'Learner')",
    ]

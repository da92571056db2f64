"""Draw the trainer's wings and the imports between them into docs/internals/trainer-wings.png.

    python scripts/draw_trainer.py              # rewrite the picture
    python scripts/draw_trainer.py --out X.png  # somewhere else

The imports come from the same scan as tests/test_import_rules.py (every import statement of
every module under trainer/, those inside functions included), so the picture shows the graph
the test checks: one box per wing with its modules, one arrow per pair of wings that import,
labelled with the number of (module, module) imports it stands for.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
PICTURE = ROOT / "docs" / "internals" / "trainer-wings.png"


def import_rules() -> ModuleType:
    """tests/test_import_rules.py, loaded by path (it holds the scan and the wing order)."""
    spec = importlib.util.spec_from_file_location("import_rules", ROOT / "tests" / "test_import_rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wing_graph(root: Path = ROOT) -> tuple[dict[str, list[str]], Counter[tuple[str, str]]]:
    """(wing -> its modules, (importing wing, imported wing) -> number of module pairs)."""
    rules = import_rules()
    graph = rules.trainer_imports(root)
    members: dict[str, list[str]] = {w: [] for w in rules.WINGS}
    for module in sorted(graph):
        name = ".".join(module.split(".")[2:])
        wing = rules.wing_of(module)
        if module == rules.TRAINER or name == wing:  # the packages themselves import nothing
            continue
        members[wing].append(name.removeprefix(f"{wing}.") if wing in rules.WINGS[1:-1] else name)
    pairs = {(m, t) for m, edges in graph.items() for _, t, _ in edges}
    arrows: Counter[tuple[str, str]] = Counter((rules.wing_of(m), rules.wing_of(t)) for m, t in pairs)
    return members, arrows


def _wrap(names: list[str], width: int) -> list[str]:
    lines = [""]
    for n in names:
        if lines[-1] and len(lines[-1]) + len(n) + 2 > width:
            lines[-1] += ","
            lines.append(n)
        else:
            lines[-1] = f"{lines[-1]}, {n}" if lines[-1] else n
    return lines


def draw(out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    members, arrows = wing_graph()
    order = list(members)[::-1]  # the run on top, the leaves at the bottom
    titles = {"run": "the run (trainer/*.py)", "rollout": "rollout/", "model": "model/", "algo": "algo/",
              "leaves": "leaves (trainer/*.py)"}
    text = {w: _wrap(members[w], 80) for w in order}
    gap, width = 0.9, 8.0
    height = {w: 0.75 + 0.22 * len(text[w]) for w in order}
    y, top = {}, 0.0
    for w in order:  # downward from 0
        top -= height[w]
        y[w] = top
        top -= gap
    fig, ax = plt.subplots(figsize=(11, 9.5))
    for w in order:
        ax.add_patch(FancyBboxPatch((0, y[w]), width, height[w], boxstyle="round,pad=0.05",
                                    facecolor="#eef3fb", edgecolor="#35588f", linewidth=1.4))
        ax.text(0.15, y[w] + height[w] - 0.15, titles[w], fontsize=12, fontweight="bold", va="top")
        ax.text(0.15, y[w] + height[w] - 0.5, "\n".join(text[w]), fontsize=8.5, va="top", family="monospace")
        n = arrows.get((w, w), 0)
        if n:
            ax.text(width - 0.1, y[w] + height[w] - 0.15, f"{n} within", fontsize=8, ha="right", va="top",
                    color="#555555")
    # one arrow per pair of wings, from the importing wing down to the imported one: next wings
    # straight between the boxes, farther ones in lanes of their own on the right
    lane = 0
    for a, b in sorted(((a, b) for a, b in arrows if a != b), key=lambda e: (order.index(e[0]), order.index(e[1]))):
        n = arrows[(a, b)]
        start, end = y[a], y[b] + height[b]
        if order.index(b) - order.index(a) == 1:
            x = width * 0.5
            ax.annotate("", xy=(x, end + 0.06), xytext=(x, start - 0.06),
                        arrowprops={"arrowstyle": "-|>", "color": "#35588f", "lw": 1.3})
            ax.text(x + 0.1, (start + end) / 2, str(n), fontsize=9, color="#35588f", va="center")
            continue
        x = width + 0.45 + 0.42 * lane
        lane += 1
        ax.plot([width + 0.05, x], [start + 0.3, start + 0.3], color="#35588f", lw=1.0)
        ax.plot([x, width + 0.12], [end - 0.3, end - 0.3], color="#35588f", lw=0)
        ax.annotate("", xy=(width + 0.08, end - 0.3), xytext=(x, end - 0.3),
                    arrowprops={"arrowstyle": "-|>", "color": "#35588f", "lw": 1.0})
        ax.plot([x, x], [start + 0.3, end - 0.3], color="#35588f", lw=1.0)
        ax.text(x + 0.05, start + 0.12, str(n), fontsize=8, color="#35588f", va="center")
    ax.set_xlim(-0.3, width + 0.8 + 0.42 * lane)
    ax.set_ylim(top + gap - 0.3, 0.4)
    ax.axis("off")
    ax.set_title("agentgym.trainer: wings import downward only (numbers: importing module pairs)", fontsize=12)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=PICTURE, help="where to write the PNG")
    print(draw(p.parse_args().out))


if __name__ == "__main__":
    main()

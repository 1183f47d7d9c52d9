"""No import runs upward: every module of grrr_stream sits in a layer (LAYERS, the table of
docs/ARCHITECTURE.md), and its imports (module level and inside functions, relative and absolute,
parsed with ast) reach only its own layer or those below. The few exceptions are listed with why.
No module imports, directly or through others, itself (no cycles, lazy imports included), and none
imports another module's private (``_name``) names. Also: at most 8 modules at the package root,
and every package says what it holds in a docstring."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.common import package_modules

PKG = Path(__file__).resolve().parents[1] / "grrr_stream"

# lowest first; a name is a package or a root module below grrr_stream ("" = grrr_stream/__init__.py,
# whose public names are imported lazily, on first use, so it imports nothing of ours at import time)
LAYERS = [
    (
        "shared: settings, errors, formats everyone uses",
        ["", "config", "columns", "errors", "dtypes", "files", "locks", "progress", "unit_log", "plots"],
    ),
    ("the machine: device, Dask, disk, timing", ["runtime"]),
    ("checkpoints: the safetensors format and tensor names", ["checkpoints"]),
    ("per-matrix math, pure torch", ["geometry"]),
    ("the Zarr store", ["store"]),
    ("MLflow", ["tracking"]),
    ("one transition", ["decompose"]),
    ("work over stores and models", ["stats", "variants", "channels", "forecast", "fixtures"]),
    ("evaluation", ["evaluation"]),
    ("orchestration: sweeps and their report", ["sweep", "report"]),
    ("the command line", ["cli"]),
]
# (importing module, imported module): why it may look upward
EXCEPTIONS = {
    ("tracking.model_runs", "evaluation.engine"): "inside log_evaluation only: an evaluation run records the engine's "
    "versions, asked of the vLLM owner when that run is logged",
    ("config", "geometry.analyses"): "the decomposition settings hold each analysis's own settings, profiles and "
    "result settings, declared once in its module (torch-free at import)",
    ("config", "geometry.analyses.base"): "the same: the analyses' shared validator",
}
ROOT_MODULES_MAX = 8


def layer_of(module: str) -> int:
    first = module.split(".")[0] if module else ""
    for i, (_, names) in enumerate(LAYERS):
        if first in names:
            return i
    raise AssertionError(f"grrr_stream.{module} is in no layer: add it to LAYERS here and to docs/ARCHITECTURE.md")


def modules() -> dict[str, Path]:
    return package_modules(PKG)


def imports_of(module: str, path: Path, known: set) -> list[tuple[int, str]]:
    """(line, imported module below grrr_stream) for each import of ours."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = [p for p in package if p]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module == "grrr_stream" or (node.module or "").startswith("grrr_stream."):
                target = node.module[len("grrr_stream.") :] if node.module != "grrr_stream" else ""
            else:
                continue
            for a in node.names:  # `from pkg import module` imports the module
                sub = f"{target}.{a.name}" if target else a.name
                out.append((node.lineno, sub if sub in known else target))
        elif isinstance(node, ast.Import):
            out += [
                (node.lineno, a.name[len("grrr_stream.") :]) for a in node.names if a.name.startswith("grrr_stream.")
            ]
    return out


def private_imports(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, 'module._name') for each private name ``module`` imports from another module of ours."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = [p for p in package if p]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            target = ".".join(package[: len(package) - (node.level - 1)] + ([node.module] if node.module else []))
        elif (node.module or "").startswith("grrr_stream"):
            target = node.module[len("grrr_stream.") :] if node.module != "grrr_stream" else ""
        else:
            continue
        out += [
            (node.lineno, f"{target}.{a.name}")
            for a in node.names
            if a.name.startswith("_") and not a.name.startswith("__")
        ]
    return out


def import_graph() -> dict[str, set[str]]:
    """module → the modules of ours it imports (anywhere in it)."""
    mods = modules()
    return {m: {t for _, t in imports_of(m, p, set(mods)) if t != m} for m, p in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_is_in_a_layer():
    for module in modules():
        layer_of(module)


def test_no_import_runs_upward():
    mods = modules()
    upward = []
    for module, path in mods.items():
        for line, target in imports_of(module, path, set(mods)):
            if layer_of(target) > layer_of(module) and (module, target) not in EXCEPTIONS:
                upward.append(
                    f"grrr_stream/{path.relative_to(PKG)}:{line}: {module or '__init__'} "
                    f"({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
                )
    assert not upward, "imports running upward:\n" + "\n".join(upward)


def test_exceptions_are_still_needed():
    """An exception that no import uses any more is removed from the table, not kept as a loophole."""
    mods = modules()
    used = {(m, t) for m, p in mods.items() for _, t in imports_of(m, p, set(mods))}
    assert set(EXCEPTIONS) <= used


def test_the_checker_sees_upward_imports(tmp_path):
    """The parser resolves relative imports to the module they name (so a violation cannot hide)."""
    f = tmp_path / "kernel.py"
    f.write_text(
        "from ..store import transition_store\nfrom .. import errors\n"
        "def f():\n    from ..sweep.plan import plan_sweep\n"
    )
    got = imports_of("geometry.kernel", f, {"store.transition_store", "errors"})
    assert got == [(1, "store.transition_store"), (2, "errors"), (4, "sweep.plan")]
    assert layer_of("sweep.plan") > layer_of("geometry.kernel") > layer_of("errors")


def test_no_import_cycles():
    """No module reaches itself through imports, module level or inside functions: a cycle is a split that
    should be one module, or a shared part that should be its own."""
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" ↔ ".join(c) for c in found)


def test_no_module_imports_another_modules_private_names():
    """A ``_name`` is its module's own: a name another module needs is public (no underscore), or moves."""
    found = [
        f"grrr_stream/{p.relative_to(PKG)}:{line}: {m or '__init__'} imports {name}"
        for m, p in modules().items()
        for line, name in private_imports(m, p)
    ]
    assert not found, "private imports:\n" + "\n".join(found)


def test_the_checkers_see_cycles_and_private_imports(tmp_path):
    """Planted: a three-module cycle and a lone self-contained module; a private and a dunder import."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]
    f = tmp_path / "x.py"
    f.write_text(
        "from .plan import _keyed, Plan\nfrom .. import __version__\ndef f():\n    from ..stats.claims import _ratio\n"
    )
    assert private_imports("sweep.x", f) == [(1, "sweep.plan._keyed"), (4, "stats.claims._ratio")]


def test_root_holds_few_modules():
    root = sorted(p.stem for p in PKG.glob("*.py") if p.stem != "__init__")
    assert len(root) <= ROOT_MODULES_MAX, root


def test_every_package_says_what_it_holds():
    for init in PKG.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 40, f"{init.relative_to(PKG)}: a docstring naming the package's entry points"


# -- names with one owner ------------------------------------------------------------------------------------------

KINDS_DIR = PKG / "sweep" / "kinds"


def kind_names() -> dict[str, Path]:
    """Each unit kind's name → its own module: the string a ``kinds/<kind>.py`` (or a module of the package
    ``kinds/<kind>/``) assigns to ``NAME`` or to its parameter model's ``kind`` ClassVar (read from the sources, so a
    new kind is seen without registering it)."""
    out = {}
    for path in sorted(KINDS_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                targets = [node.target.id]
            else:
                continue
            if (
                set(targets) & {"NAME", "kind"}
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                out[node.value.value] = path
    return out


def _strings(node: ast.AST) -> list[str]:
    """The string literals of an expression (a tuple, list or set of them too)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _is_kind(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or (
        isinstance(node, ast.Name) and node.id == "kind"
    )


def kind_name_literals(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, literal) where a kind's name is spelled to pick units or a registry entry: compared with a
    ``kind`` (``u.kind == "decompose"``, ``kind in ("a", "b")``), used as a key of ``KINDS``, or as the start
    of a unit id a unit is picked by (``uid.startswith("decompose/")``). Other strings that happen to equal a
    kind's name (a CSV column "variant", an MLflow metric "channels/count") are not a kind's name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and any(_is_kind(s) for s in (node.left, *node.comparators)):
            found += [(node.lineno, s) for side in (node.left, *node.comparators) for s in _strings(side) if s in names]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "KINDS":
            found += [(node.lineno, s) for s in _strings(node.slice) if s in names]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith":
            found += [
                (node.lineno, s)
                for a in node.args
                for s in _strings(a)
                for n in names
                if s == n or s.startswith(f"{n}/")
            ]
    return found


def _owns(owner: Path, path: Path) -> bool:
    """A kind's module, or any module of the package its module is part of (``kinds/<kind>/``)."""
    return path == owner or (owner.parent != KINDS_DIR and owner.parent in path.parents)


def test_a_kinds_name_is_spelled_only_in_its_own_module():
    """Other modules pick a kind's units through the kind's ``NAME`` (or the registry), never by a literal: a
    renamed kind, or a kind whose name another module misspells, would silently match no unit."""
    names = kind_names()
    assert {"generate", "decompose", "evaluate"} <= set(names), names
    found = [
        f"grrr_stream/{p.relative_to(PKG)}:{line}: {s!r} (the name of kind {s.split('/')[0]}, "
        f"owned by {names[s.split('/')[0]].name})"
        for p in sorted(PKG.rglob("*.py"))
        for line, s in kind_name_literals(p, set(names))
        if not _owns(names[s.split("/")[0]], p)
    ]
    assert not found, "kind names spelled outside their module:\n" + "\n".join(found)


def test_the_kind_name_check_bites(tmp_path):
    """Planted: a comparison, a membership test, a registry lookup and a unit id, beside look-alikes it leaves
    alone (a transition's kind, a dict key or a metric name that happens to hold a kind's name)."""
    f = tmp_path / "x.py"
    f.write_text(
        'gen = [u for u in units if u.kind == "generate"]\n'
        'if kind in ("decompose", "other"):\n    pass\n'
        'k = KINDS["evaluate"]\n'
        'done = [u for u in units if u.id.startswith(("decompose/", "x"))]\n'
        'ok = tr.kind == "cumulative" and row["variant"] and {"channels": 1} and "channels/count"\n'
    )
    got = kind_name_literals(f, {"generate", "decompose", "evaluate", "variant", "channels"})
    assert sorted(got) == [(1, "generate"), (2, "decompose"), (4, "evaluate"), (5, "decompose/")]


# the names of a sweep workdir's folders and files → the module that spells them (the others ask it: Workdir's
# properties, a kind's constants, the writer's constant). Names of a unit folder's files that another package reads
# are owned by the package that writes them.
WORKDIR_NAMES = {
    **dict.fromkeys([".sweep", "units", "lock", "tracking", "forecast.json", "report", "logs"], "sweep/workdir.py"),
    "evaluation.json": "evaluation/pipeline.py",  # an evaluation's record (the evaluate kind's marker)
    "comparisons.csv": "stats/run.py",  # the comparisons' table (compare's marker and report table)
    "offdiag_cosine_medians.png": "stats/run.py",  # the comparisons' figures (also in WORKDIR/report)
    "update_norms.png": "stats/run.py",
    "channels.json": "channels/analysis.py",  # a channels unit's marker
    "chain.json": "fixtures/tinychain_shipped.py",  # the tiny chain's record (the generate kind's marker)
    # WORKDIR/report: the tables and figures each kind writes there, read back by the HTML page (report/)
    "transitions.csv": "sweep/kinds/decompose.py",
    "band_energy.png": "sweep/kinds/decompose.py",
    "channels.csv": "sweep/kinds/channel_stats.py",
    "channel_layers.png": "sweep/kinds/channel_stats.py",
    "channel_models.csv": "sweep/kinds/channels.py",
    "channels_sft_rl.csv": "sweep/kinds/channel_groups.py",
    **dict.fromkeys(
        ["retention.csv", "removal.csv", "sampled.csv", "engine_dtype.csv"], "sweep/kinds/evaluate/rows.py"
    ),
    **dict.fromkeys(
        ["differences.csv", "informative.csv", "claims.csv", "claims.json", "claims"], "sweep/kinds/claims.py"
    ),
    "channels_sft_rl.json": "sweep/kinds/channel_groups.py",
    "channel_groups": "sweep/kinds/channel_groups.py",
    "units.csv": "sweep/rows.py",
    "index.html": "report/build.py",
    # WORKDIR/<folder>: each kind's results (its FOLDER constant, given to ctx.keyed / Workdir.folder)
    "stores": "sweep/kinds/decompose.py",
    "channels": "sweep/kinds/channels.py",
    "channel_stats": "sweep/kinds/channel_stats.py",
    "stats": "sweep/kinds/stats.py",
    "comparisons": "sweep/kinds/compare.py",
    "variants": "sweep/kinds/variant.py",
    "evaluations": "sweep/kinds/evaluate/__init__.py",
    "tinychain": "sweep/kinds/generate.py",
}
# an evaluation's results folder holds an accuracy.csv and a solved_lost.csv of its own (evaluation/pipeline.py) and
# the report one of the same names: the scan checks these names for both owners
SHARED_NAMES = {
    "accuracy.csv": {"evaluation/pipeline.py", "sweep/kinds/evaluate/rows.py"},
    "solved_lost.csv": {"evaluation/pipeline.py", "sweep/kinds/evaluate/rows.py"},
    # WORKDIR/frames (the sweep's frame cache) and a lone decomposition's STORE/frames
    "frames": {"sweep/kinds/decompose.py", "config.py"},
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        ):
            out.add(id(node.body[0].value))
    return out


def spelled_names(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) where a workdir name is spelled: a file name (one with a dot) as any string but a
    docstring; a folder name where a path is built from it (``root / "logs"``, ``.joinpath("units")``,
    ``workdir.folder("stores")``)."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and "." in node.value.strip(".")
            and node.value in names
        ):
            found.append((node.lineno, node.value))
        parts = (
            [node.left, node.right]
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
            else node.args
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("joinpath", "folder")
            else []
        )
        found += [(node.lineno, s) for p in parts for s in _strings(p) if s in names and "." not in s.strip(".")]
    return sorted(set(found))


def test_no_workdir_name_is_spelled_outside_its_owner():
    """Every other module reaches a workdir folder or file through its owner, so a layout change is one edit
    and an old workdir keeps reading as done."""
    owners = {n: {o} for n, o in WORKDIR_NAMES.items()} | SHARED_NAMES
    found = [
        f"grrr_stream/{p.relative_to(PKG)}:{line}: {name!r} (owned by {', '.join(sorted(owners[name]))})"
        for p in sorted(PKG.rglob("*.py"))
        for line, name in spelled_names(p, set(owners))
        if p.relative_to(PKG).as_posix() not in owners[name]
    ]
    assert not found, "workdir names spelled outside their owner:\n" + "\n".join(found)


def test_the_workdir_name_check_bites(tmp_path):
    """Planted: a folder joined into a path, a file name in a constant and in a call; left alone: a docstring, a
    folder name that builds no path (a dict key, a CLI subcommand) and a message that mentions a file."""
    f = tmp_path / "x.py"
    f.write_text(
        '"""Writes WORKDIR/logs and forecast.json."""\n'
        'log = Path(w) / "logs" / name\n'
        'FILE = "forecast.json"\n'
        'read_rows(out.joinpath("units"), "comparisons.csv", ctx.workdir.folder("stores"))\n'
        'row = {"units": 3, "report": 1}\n'
        'print(f"wrote {out}/forecast.json")\n'
    )
    got = spelled_names(f, {"logs", "forecast.json", "units", "report", "comparisons.csv", "stores"})
    assert got == [(2, "logs"), (3, "forecast.json"), (4, "comparisons.csv"), (4, "stores"), (4, "units")]

"""The package's layers point one way, as docs/developing.md's layout table says:
the emulator (``cuda_emulator``) imports nothing of the book's and is built through one
path, every import between attnbook's subpackages goes down (lazy imports inside
functions included), no two modules import each other, no module reaches into
another's private names, and ``import attnbook`` leaves the plots and the models for
their first use."""
import ast
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attnbook"
EMULATOR = ROOT / "src" / "cuda_emulator"
# Each layer may import those of lower rank only (all of them may import the emulator,
# below them all); the developer tools for a GPU at the top.
RANK = {"toolchain": 1, "args": 2, "reference": 3, "ops": 4, "bench": 5,
        "figures": 6, "exercises": 6, "models": 7, "gpu": 8}


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports():
    """{module: {(imported module, names)}} of every attnbook import in the package,
    but the façade (attnbook/__init__) and entry points (__main__), which stand above
    every layer."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        if name == "attnbook" or path.name == "__main__.py":
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif isinstance(node, ast.ImportFrom):
                target = node.module or ""
            elif isinstance(node, ast.Import):
                found[name] |= {(a.name, ()) for a in node.names
                                if a.name.startswith("attnbook")}
                continue
            else:
                continue
            if target.startswith("attnbook"):
                names = tuple(a.name for a in node.names)
                submodules = [f"{target}.{n}" for n in names
                              if (PACKAGE.parent / f"{target}.{n}".replace(".", "/")
                                  ).with_suffix(".py").is_file()]
                if len(submodules) < len(names):   # not only submodules
                    found[name].add((target, names))
                found[name] |= {(m, ()) for m in submodules}
    return found


def layer(module: str) -> str:
    return module.split(".")[1]


def test_every_layer_is_ranked():
    assert {layer(m) for m in imports()} == set(RANK)


def test_imports_between_layers_go_down():
    up = sorted(f"{m} imports {t}" for m, targets in imports().items()
                for t, _ in targets
                if t != "attnbook" and layer(t) != layer(m)
                and RANK[layer(t)] >= RANK[layer(m)])
    assert not up, up


def test_the_developers_page_lists_the_layers_from_the_bottom_up():
    rows = re.findall(r"^\| `src/attnbook/(\w+)/` \|",
                      (ROOT / "docs" / "developing.md").read_text(),
                      re.M)
    ranks = [RANK[r] for r in rows if r in RANK]     # kernels/ holds no Python
    assert set(RANK) <= set(rows), rows
    assert ranks == sorted(ranks), rows


def test_no_modules_import_each_other():
    found = imports()
    graph = {m: {t for t, _ in targets if t in found} for m, targets in found.items()}

    def reaches(start, goal, seen):
        return any(t == goal or (t not in seen and not seen.add(t)
                                 and reaches(t, goal, seen))
                   for t in graph[start])

    circles = sorted(m for m in graph if reaches(m, m, set()))
    assert not circles, circles


def test_no_private_names_across_modules():
    reached = sorted(f"{m}: {t}.{n}" for m, targets in imports().items()
                     for t, names in targets for n in names
                     if n.startswith("_") and t != m)
    for path in PACKAGE.rglob("*.py"):
        reached += [f"{module_name(path)}: {hit}" for hit in re.findall(
            r"\b(?:emulat(?:or|e)|compile|ptx|sanitizer|ops|flash|registry)"
            r"\._[a-z]\w*", path.read_text())]
    assert not reached, reached


def test_import_attnbook_leaves_plots_and_models_for_later():
    probe = ("import sys, attnbook as ab\n"
             "heavy = [m for m in sys.modules if m == 'matplotlib.pyplot'\n"
             "         or m.startswith(('attnbook.models', 'transformers'))]\n"
             "assert not heavy, heavy\n"
             "assert ab.models.Decoder and ab.plots.plot_speedups\n"
             "from attnbook.figures import diagrams\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]


def _calls(folders) -> dict[str, set[str]]:
    """{the name a call calls (``f`` of ``f(…)`` or ``x.f(…)``): {files}} in the
    Python files of ``folders``."""
    found = {}
    for folder in folders:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.attr if isinstance(f, ast.Attribute) else \
                        getattr(f, "id", "")
                    found.setdefault(name, set()).add(
                        path.relative_to(ROOT / "src").as_posix())
    return found


def test_the_emulator_imports_nothing_of_the_book():
    found = []
    for path in EMULATOR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and \
                not node.level else []
            found += [f"{path.name}: {n}" for n in names
                      if n.split(".")[0] == "attnbook"]
    assert not found, found


def test_one_translation_one_cache_key_one_twin():
    """CUDA text becomes the emulator's C++ in ``Build.units`` alone (nothing of
    attnbook's calls the translator), every build's folder is named by
    ``cache.cache_key``, and the checked twin is one class."""
    calls = _calls([EMULATOR, PACKAGE])
    assert calls["to_cpp"] == {"cuda_emulator/build.py"}, calls["to_cpp"]
    assert calls["inline_headers"] == {"cuda_emulator/build.py",
                                       "cuda_emulator/emulate.py"}   # recursive
    builds = _calls([EMULATOR, PACKAGE / "toolchain"])
    assert builds["sha256"] == {"cuda_emulator/cache.py"}, builds["sha256"]
    twins = [f"{path.name}: {node.name}"
             for folder in (EMULATOR, PACKAGE) for path in folder.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.ClassDef) and "Twin" in node.name]
    assert twins == ["build.py: Twin"], twins


def _names_an_option(path: pathlib.Path, option: str) -> bool:
    """Whether the file declares, passes on or reads the scalar mask ``option`` by
    name: in Python a parameter, a field, a keyword passed on as it came
    (``option=option``) or a dict key; in C++ any use outside comments."""
    from cuda_emulator.emulate import blank_out
    if path.suffix != ".py":
        return re.search(rf"\b{option}\b", blank_out(path.read_text(),
                                                     strings=False)) is not None
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.arg) and node.arg == option or \
                isinstance(node, ast.AnnAssign) and \
                getattr(node.target, "id", "") == option or \
                isinstance(node, ast.Dict) and any(
                    isinstance(k, ast.Constant) and k.value == option
                    for k in node.keys):
            return True
        if isinstance(node, ast.keyword) and node.arg == option and option in (
                getattr(node.value, "id", None), getattr(node.value, "attr", None)):
            return True
    return False


def test_a_scalar_mask_lives_in_four_files():
    """Adding a scalar mask option is its line in MASK_OPTIONS (mask_params.h), its
    rule in mask.cuh and in reference/masks.py and its keyword in args/attention.py:
    the files that name ``window`` are those alone (the ops and the references pass
    the book's masks on as ``**mask``; the wrappers fill MaskParams from the list; an
    exercise's kernel is the reader's own)."""
    places = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*")
                    if p.suffix in (".py", ".h", ".cuh", ".cu", ".cpp")
                    and "exercises" not in p.parts and _names_an_option(p, "window"))
    assert places == ["args/attention.py", "kernels/mask.cuh", "kernels/mask_params.h",
                      "reference/masks.py"], places

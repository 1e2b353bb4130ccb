"""Show source code in a notebook: rendered as a highlighted block in Jupyter and in the
book."""
from __future__ import annotations

import re

from cuda_emulator.emulate import blank_out

from ..toolchain.compile import kernel_source

__all__ = ["show_kernel", "show_profiled", "show_source", "declarations"]


class _Code:
    def __init__(self, text: str, language: str):
        self.text, self.language = text, language

    def _repr_markdown_(self):
        return f"```{self.language}\n{self.text.rstrip()}\n```"

    def __repr__(self):
        return self.text


# What a line at column 0 declares: a macro, a type, an alias, a function (the first
# name before a parenthesis, attributes aside), a variable.
_DECLARED = [re.compile(p) for p in (
    r"#define\s+(\w+)",
    r"(?:template\s*<.*>\s*)?(?:struct|class|union|enum(?:\s+class)?)\s+(\w+)",
    r"using\s+(\w+)\s*=",
    r"(?:[^(=]*?\s)?(\w+)\s*\(",
    r"[^(]*?\b(\w+)\s*(?:=|\[|;|\{)")]

_ATTRIBUTES = re.compile(r"(__launch_bounds__|alignas)\s*\([^)]*\)\s*|"
                         r"__attribute__\s*\(\(.*?\)\)\s*")


def _declared(line: str) -> str | None:
    if not line or line[0] in " \t}/" or line.startswith(("template", "#include",
                                                           "#pragma", "#if", "#e")):
        return None
    line = _ATTRIBUTES.sub("", line)
    for pattern in _DECLARED:
        m = pattern.match(line)
        if m:
            return m.group(1)
    return None


def _end(masked: list[str], i: int) -> int:
    """The last line of the declaration that starts at line ``i``: its ``;``, or the
    line of the brace that closes its body."""
    depth = 0
    opened = False
    for j in range(i, len(masked)):
        if masked[j].startswith("#define"):
            while masked[j].rstrip().endswith("\\"):
                j += 1
            return j
        for c in masked[j]:
            if c in "({[":
                depth += 1
                opened |= c == "{"
            elif c in ")}]":
                depth -= 1
                if depth == 0 and c == "}" and opened:
                    return j
            elif c == ";" and depth == 0:
                return j
    raise SyntaxError(f"a declaration at line {i + 1} does not end")


def declarations(text: str) -> dict[str, list[tuple[int, int]]]:
    """Each name declared at the top level of kernel text, with the lines (first, last;
    0-based) of each of its declarations: the comment and ``template`` lines right above
    it, through its ``;`` or the brace that closes its body. Overloads and
    specialisations are several declarations of one name."""
    lines = text.splitlines()
    masked = blank_out(text, strings=True).splitlines()
    found: dict[str, list[tuple[int, int]]] = {}
    i = 0
    while i < len(lines):
        # the name may be on the next line (after `__global__ void __launch_bounds__`)
        name = _declared(masked[i]) if masked[i].strip() else None
        if name is None and re.match(r"\w", masked[i]) and i + 1 < len(lines):
            name = _declared(masked[i] + " " + masked[i + 1].strip())
        if name is None:
            i += 1
            continue
        first = i
        while first > 0 and lines[first - 1].startswith(("//", "template")):
            first -= 1
        last = _end(masked, i)
        found.setdefault(name, []).append((first, last))
        i = last + 1
    return found


def show_kernel(filename: str, *names: str):
    """The kernel file ``filename``, or only the declarations of ``names`` in it (each
    with its comment; every overload of a name), in that order, for display."""
    text = kernel_source(filename)
    if names:
        lines = text.splitlines()
        found = declarations(text)
        missing = [n for n in names if n not in found]
        if missing:
            raise KeyError(f"{filename} declares no {missing}; it declares "
                           f"{sorted(found)}")
        spans = [span for n in names for span in found[n]]
        # declarations next to each other in the file stay together
        text = "\n".join(lines[spans[0][0]:spans[0][1] + 1])
        for (_, end), (a, b) in zip(spans, spans[1:]):
            text += ("\n" if a == end + 1 else "\n\n") + "\n".join(lines[a:b + 1])
    return _Code(text.rstrip("\n"), "cuda")


def show_profiled(launch):
    """The source of each line of the package's kernel files that ``launch`` (a
    launch of :func:`attnbook.profile`'s report) counted, after its number, each file's
    name above its lines: the profile's rows put to their code. Lines of other files
    (a notebook's kernel) are left out."""
    out, shown, texts = [], None, {}
    for location in dict.fromkeys(r.location for r in launch.rows):
        file, _, number = location.rpartition(":")
        if file not in texts:   # each file read once; None: not the package's
            try:
                texts[file] = kernel_source(file).splitlines()
            except FileNotFoundError:
                texts[file] = None
        lines = texts[file]
        if lines is None:
            continue
        if file != shown:
            out.append(f"// {file}")
            shown = file
        line = f"{number:>4}  {lines[int(number) - 1].strip()}"
        if len(line) > 88:   # its comment goes first, then the end of the code
            line = line.split("  //")[0].rstrip()
            line = line if len(line) <= 88 else line[:87] + "…"
        out.append(line)
    return _Code("\n".join(out), "cuda")


def show_source(obj):
    """The Python source of a function of the package, for display."""
    import inspect
    return _Code(inspect.getsource(obj), "python")

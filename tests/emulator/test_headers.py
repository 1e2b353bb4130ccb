"""The emulator's headers stand alone: each compiles as the first line of a file, in the
plain build (and in the checked one where its text depends on it), with the flags and
include path of an emulator build; each has an include guard; and each includes what
it needs at its top, before any code (the order the headers depend on each other is in
their #includes, not in where an includer puts them)."""
import subprocess
import sysconfig

import pytest

import attnbook as ab
from cuda_emulator.emulate import blank_out
from cuda_emulator.cache import cpp_extension
from cuda_emulator.build import CHECKED_FLAGS, CPU_FLAGS

FOLDER = ab.emulator.INCLUDE_DIR
HEADERS = sorted(p.relative_to(FOLDER).as_posix() for p in FOLDER.rglob("*")
                 if p.is_file())
# As the standard headers they stand in for, these redefine assert at each inclusion.
UNGUARDED = {"assert.h", "cassert"}
# emu_program.h ends the text of a program (python -m cuda_emulator.program),
# which is built with these.
CONTEXT = {"emu_program.h": ["-DATTNBOOK_PROGRAM", "-DATTNBOOK_PROGRAM_CHECKS=3"]}


def test_every_header_is_found():
    assert {"cuda_emulator.h", "emu_runtime.h", "emu_checked.h", "cassert",
            "c10/cuda/CUDAStream.h", "cuda/pipeline"} <= set(HEADERS)


# The checked build's flags change a header's text only through ATTNBOOK_CHECKED
# (-fsanitize=thread is codegen, which -fsyntax-only does not reach): the headers that
# test it, and those of the checked build's hooks (__tsan_*), compile alone in both
# builds, the others once.
CHECKED = [h for h in HEADERS if any(word in (FOLDER / h).read_text()
                                     for word in ("ATTNBOOK_CHECKED", "__tsan"))]


@pytest.mark.parametrize("header, checked", [
    *((h, False) for h in HEADERS), *((h, True) for h in CHECKED)],
    ids=lambda v: v if isinstance(v, str) else ("checked" if v else "plain"))
def test_header_compiles_alone(header, checked):
    system = [*cpp_extension.include_paths(), sysconfig.get_path("include")]
    flags = [*CPU_FLAGS, "-DATTNBOOK_EMU_ARCH=800", "-DTORCH_API_INCLUDE_EXTENSION_H",
             *(CHECKED_FLAGS if checked else ()), *CONTEXT.get(header, ()),
             f"-I{FOLDER}", f"-I{ab.toolchain.INCLUDE_DIR}",
             *(f"-isystem{p}" for p in system)]
    done = subprocess.run(["c++", *flags, "-fsyntax-only", "-x", "c++", "-"],
                          input=f"#include <{header}>\n", capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def directives(header: str) -> tuple[list[str], list[str]]:
    """The header's preprocessor lines before its first line of code, and the
    #include lines after it (comments blanked, continued lines joined)."""
    text = blank_out((FOLDER / header).read_text(), strings=False)
    lines = [ln.strip() for ln in text.replace("\\\n", " ").splitlines()]
    code = next((i for i, ln in enumerate(lines) if ln and not ln.startswith("#")),
                len(lines))
    late = [ln for ln in lines[code:] if ln.startswith("#") and "include" in ln]
    return lines[:code], late


@pytest.mark.parametrize("header", HEADERS)
def test_header_has_a_guard_and_includes_at_its_top(header):
    top, late = directives(header)
    assert not late, f"{header} includes after its first line of code: {late}"
    if header not in UNGUARDED:
        assert "#pragma once" in top, f"{header} has no include guard"

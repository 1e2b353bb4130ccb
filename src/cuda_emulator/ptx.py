"""Inline PTX on the CPU emulator.

:func:`to_cpp` rewrites every ``asm("…" : outputs : inputs : clobbers)`` statement of
kernel text into C++ on one line (the statement's own lines are kept as blank lines):
each PTX instruction becomes a call of the emulator (``include/emu_ptx.h``)
with the asm's operands as arguments, following the PTX ISA:

* ``mma.sync.aligned`` m16n8k16 (f16 or bf16 inputs, f32 or f16 accumulators) and
  m16n8k8 (f16, bf16), rows × columns; m16n8k32 and m16n8k16 with s8/u8 inputs and
  s32 accumulators (``.satfinite`` or not);
* ``ldmatrix.sync.aligned.m8n8`` .x1/.x2/.x4, optionally .trans;
* ``cp.async`` .ca/.cg of 4, 8 or 16 bytes with an optional source size (the rest is
  zero-filled), ``cp.async.commit_group``, ``.wait_group N``, ``.wait_all``; the copies
  land when a wait covering them returns;
* ``cvta`` to and from the shared state space (32-bit shared addresses), ``cvt``
  between integer widths and to f16/bf16, ``mov`` (registers, ``%laneid``, ``%tid``…,
  packing and unpacking), ``ld``/``st`` shared, global or generic, scalar or
  ``.v2``/``.v4``, ``.b128`` registers (``mov``, ``ld``, ``st``), ``ex2.approx`` and
  the other approximate f32 functions,
  ``shfl.sync``, named barriers (``bar.sync``/``bar.arrive`` id, thread count), ``setp``
  with ``@p`` predicates, ``selp``, ``.reg`` temporaries, fences and prefetches
  (nothing to do on the emulator), scalar arithmetic (``add``, ``sub``, ``mul``
  .lo/.hi/.wide, ``mad``, ``fma.rn``, ``min``, ``max``, ``div``, ``neg``, ``abs``,
  bitwise, shifts, ``lop3``, ``prmt``) in round-to-nearest;
* Hopper's (``include/emu_hopper.h``): ``mbarrier`` (init, inval, arrive, arrive_drop,
  expect_tx, complete_tx, try_wait and test_wait, with .parity or a state), labels and
  ``bra`` (a wait loop), ``elect.sync``, ``setmaxnreg``, ``cp.async.bulk.tensor`` 1-5d
  loads on an mbarrier and stores in bulk groups (tensor maps from
  ``cuTensorMapEncodeTiled``), ``cp.async.bulk`` copies, and ``wgmma`` (fence,
  commit_group, wait_group; mma_async m64nNk16, f16/bf16 into f32, A from registers or
  shared memory, both through matrix descriptors with every swizzle).

Any other instruction is a :class:`SyntaxError` naming it and its line, in the header
it was written in where it came from one (``compile`` reports it as a
``CompileError``): an asm statement never compiles into nothing.
"""
from __future__ import annotations

import re

from .emulate import blank_out

__all__ = ["to_cpp", "SUPPORTED"]

SUPPORTED = ("mma.sync", "ldmatrix", "cp.async", "cvta", "cvt", "mov", "ld", "st",
             "integer and float arithmetic", "lop3", "prmt",
             "ex2.approx", "lg2/rcp/sqrt/rsqrt/sin/cos/tanh.approx", "shfl.sync",
             "bar.sync/bar.arrive", "setp", "selp", "membar/fence", "prefetch", "bra",
             "mbarrier", "elect.sync", "setmaxnreg", "cp.async.bulk(.tensor)",
             "wgmma")

_ASM = re.compile(r"(?<![\w.])(?:asm|__asm__|__asm)\s*"
                  r"(?:(?:volatile|__volatile__|inline|goto)\s*)*\(")
_E = "::attnbook_emu::ptx::"
_READ = {"r": "u32", "l": "u64", "h": "u16", "f": "f32", "d": "f64", "n": "u64",
         "i": "u64"}
# C++ type of a PTX scalar type.
_CTYPE = {"b8": "uint8_t", "u8": "uint8_t", "s8": "int8_t", "b16": "uint16_t",
          "u16": "uint16_t", "s16": "int16_t", "f16": "uint16_t", "bf16": "uint16_t",
          "b32": "uint32_t", "u32": "uint32_t", "s32": "int32_t", "f32": "float",
          "f16x2": "uint32_t", "bf16x2": "uint32_t", "b64": "uint64_t",
          "u64": "uint64_t", "s64": "int64_t", "f64": "double", "pred": "bool",
          "b128": "::attnbook_emu::ptx::b128"}
_SPECIAL = {"laneid": f"{_E}laneid()", "warpsize": "32u"} | {
    f"{n}.{d}": f"{b}.{d}" for n, b in (("tid", "threadIdx"), ("ntid", "blockDim"),
                                        ("ctaid", "blockIdx"), ("nctaid", "gridDim"))
    for d in "xyz"}
_APPROX = {"ex2": "exp2f({})", "lg2": "log2f({})", "rcp": "(1.f / {})",
           "sqrt": "sqrtf({})", "rsqrt": "(1.f / sqrtf({}))", "sin": "sinf({})",
           "cos": "cosf({})", "tanh": "tanhf({})"}
_ARITH_TYPES = ("u16", "s16", "u32", "s32", "b32", "u64", "s64", "b64", "f32", "f64")
_ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "min": 2, "max": 2, "and": 2,
          "or": 2, "xor": 2, "shl": 2, "shr": 2, "neg": 1, "not": 1, "abs": 1,
          "fma": 3, "mad": 3}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
        "lo": "<", "ls": "<=", "hi": ">", "hs": ">="}


# wgmma and setmaxnreg are sm_90a's (nvcc: "not supported on .target 'sm_90'").
_SM90A = ('static_assert(ATTNBOOK_EMU_ARCH_FEATURES, "wgmma and setmaxnreg need '
          'sm_90a: build for arch sm_90a");')


class _Unsupported(Exception):
    pass


def _strings(text: str) -> str:
    """The value of the concatenated string literals in ``text``."""
    out = []
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', text, re.S):
        out.append(re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t"}.get(
            e.group(1), e.group(1)), m.group(1)))
    return "".join(out)


def _split(text: str, masked: str, sep: str) -> list[tuple[int, int]]:
    """Spans of ``text`` between top-level ``sep`` characters (a C++ ``::`` sits in
    parentheses: at the top of an asm statement, ``::`` is two separators)."""
    spans, depth, start = [], 0, 0
    for i, c in enumerate(masked):
        depth += (c in "([{") - (c in ")]}")
        if c == sep and depth == 0:
            spans.append((start, i))
            start = i + 1
    spans.append((start, len(masked)))
    return spans


class _Asm:
    """One asm statement: its operands bound to C++ names, its PTX turned into C++."""

    def __init__(self, body: str, masked: str, site: int = 0):
        self.site = site
        sections = [(body[a:b], masked[a:b]) for a, b in _split(body, masked, ":")]
        self.template = _strings(sections[0][0])
        self.binds, self.kinds, self.names, self.regs = [], [], {}, {}
        for n, (text, mtext) in enumerate(sections[1:3]):
            for a, b in _split(text, mtext, ","):
                if mtext[a:b].strip():
                    self._operand(text[a:b], output=n == 0)

    def _operand(self, text: str, output: bool) -> None:
        m = re.fullmatch(r'\s*(?:\[\s*(\w+)\s*\]\s*)?"([^"]*)"\s*\((.*)\)\s*', text,
                         re.S)
        if not m:
            raise _Unsupported(f"asm operand {text.strip()!r}")
        name, constraint, expr = m.groups()
        k = len(self.kinds)
        if name:
            self.names[name] = k
        letters = constraint.lstrip("=+&")
        if letters.isdigit():                       # tied to output operand N
            tied = int(letters)
            self.binds.append(f"{_E}put(attnbook_o{tied}, ({expr}));"
                              f" auto& attnbook_o{k} = attnbook_o{tied};")
            self.kinds.append(self.kinds[tied])
            return
        kind = next((_READ[c] for c in letters if c in _READ), None)
        if kind is None:
            raise _Unsupported(f"asm constraint {constraint!r}")
        self.kinds.append(kind)
        self.binds.append(f"auto& attnbook_o{k} = ({expr});" if output else
                          f"const auto attnbook_o{k} = ({expr});")

    # ---- operands of one instruction -------------------------------------------------
    def lvalue(self, tok: str) -> str:
        tok = tok.strip()
        m = re.fullmatch(r"%(\d+)", tok)
        if m:
            return f"attnbook_o{m.group(1)}"
        if tok in self.regs:
            return f"attnbook_r_{tok.lstrip('@')}"
        raise _Unsupported(f"destination {tok!r}")

    def read(self, tok: str, kind: str = "u32") -> str:
        tok = tok.strip()
        m = re.fullmatch(r"%(\d+)", tok)
        if m:
            return f"{_E}{kind}(attnbook_o{m.group(1)})"
        if tok in self.regs:
            return f"{_E}{kind}(attnbook_r_{tok.lstrip('@')})"
        if tok.startswith("@@"):
            if tok[2:] not in _SPECIAL:
                raise _Unsupported(f"special register %{tok[2:]}")
            return f"{_E}{kind}({_SPECIAL[tok[2:]]})"
        m = re.fullmatch(r"0[fF]([0-9a-fA-F]{8})", tok)
        if m:
            return f"__uint_as_float(0x{m.group(1)}u)"
        if re.fullmatch(r"-?\d+\.\d*(?:[eE][-+]?\d+)?", tok):
            return f"{_E}{kind}({tok})"
        if re.fullmatch(r"-?(0[xX][0-9a-fA-F]+|\d+)[uU]?", tok):
            return f"{_E}{kind}({tok.rstrip('uU')}ull)"
        raise _Unsupported(f"operand {tok!r}")

    def address(self, tok: str) -> str:
        m = re.fullmatch(r"\s*\[\s*([^\]+]+?)\s*(?:\+\s*(-?\w+)\s*)?\]\s*", tok)
        if not m:
            raise _Unsupported(f"address {tok.strip()!r}")
        base = self.read(m.group(1), "u64")
        return f"({base} + {m.group(2)})" if m.group(2) else base

    @staticmethod
    def vector(tok: str) -> list[str]:
        tok = tok.strip()
        if tok.startswith("{") and tok.endswith("}"):
            return [t.strip() for t in tok[1:-1].split(",")]
        return [tok]

    def put(self, tok: str, value: str) -> str:
        return f"{_E}put({self.lvalue(tok)}, {value});"

    # ---- the program -----------------------------------------------------------------
    def cpp(self) -> str:
        text = re.sub(r"//[^\n]*", "", self.template)
        text = re.sub(r"%\[(\w+)\]", lambda m: f"%{self.names[m.group(1)]}", text)
        text = text.replace("%%", "@@")
        out = []
        for stmt in text.split(";"):
            stmt = stmt.strip()
            while True:
                if stmt[:1] in ("{", "}"):        # scopes: { .reg .u64 t; ... }
                    stmt = stmt[1:].strip()
                elif m := re.match(r"(\w+)\s*:(?!:)\s*", stmt):   # a label
                    out.append(f"{self.label(m.group(1))}: ;")
                    stmt = stmt[m.end():]
                else:
                    break
            if stmt:
                out.append(self.instruction(stmt))
        return " ".join(self.binds + out)

    def label(self, name: str) -> str:
        """A label's C++ name: one per asm statement of the file (a C++ label belongs
        to its whole function)."""
        return f"attnbook_L{self.site}_{name}"

    def instruction(self, stmt: str) -> str:
        guard = re.match(r"@(!?)((?:@@)?\w+)\s+", stmt)
        if guard:
            body = self.instruction(stmt[guard.end():])
            cond = self.read(guard.group(2), "u32")
            return f"if ({'!' if guard.group(1) else ''}{cond}) {{ {body} }}"
        if stmt.startswith(".reg"):
            return self.declare(stmt)
        # The opcode ends where its operands begin, space or not: literals joined as
        # "ldmatrix...b16" "{%0, %1}, [%2];" read "b16{%0".
        opcode, rest = re.match(r"([\w.:]+)\s*(.*)", stmt, re.S).groups()
        ops = [rest[a:b].strip() for a, b in _split(rest, rest, ",")] if rest.strip() \
            else []
        parts = opcode.split(".")
        handler = getattr(self, "op_" + parts[0].replace("::", "_"), None)
        if handler is None:
            raise _Unsupported(opcode)
        return handler(opcode, parts, ops)

    def declare(self, stmt: str) -> str:
        m = re.fullmatch(r"\.reg\s+\.(\w+)\s+([@\w\s,]+)", stmt)
        if not m or m.group(1) not in _CTYPE:
            raise _Unsupported(stmt)
        names = [n.strip() for n in m.group(2).split(",")]
        self.regs.update(dict.fromkeys(names))   # %%name: a name of its own too
        return " ".join(f"{_CTYPE[m.group(1)]} attnbook_r_{n.lstrip('@')}{{}};"
                        for n in names)

    # ---- instructions ----------------------------------------------------------------
    def op_mma(self, opcode, parts, ops):
        if len(parts) > 4 and parts[-3] in ("s8", "u8"):
            return self._mma_int(opcode, parts, ops)
        shape = parts[3] if len(parts) > 3 else ""
        types = parts[-4:]
        ok = (parts[1:3] == ["sync", "aligned"] and shape in ("m16n8k16", "m16n8k8")
              and parts[4:6] == ["row", "col"] and len(parts) == 10
              and types[1] == types[2] in ("f16", "bf16") and types[0] == types[3]
              and types[0] in ("f32", "f16") and not (types[1] == "bf16"
                                                      and types[0] == "f16"))
        if not ok or len(ops) != 4:
            raise _Unsupported(opcode)
        k = 16 if shape == "m16n8k16" else 8
        t = "__half" if types[1] == "f16" else "__nv_bfloat16"
        d, a, b, c = (self.vector(o) for o in ops)
        acc = types[0] == "f32"
        want = (4 if acc else 2, k // 4, k // 8, 4 if acc else 2)
        if (len(d), len(a), len(b), len(c)) != want:
            raise _Unsupported(f"{opcode} with {len(d)}, {len(a)}, {len(b)}, {len(c)} "
                               "registers")
        arch = 800 if k == 16 or t != "__half" else 750
        ctype, read = ("float", "f32") if acc else ("uint32_t", "u32")
        code = [f'static_assert(__CUDA_ARCH__ >= {arch}, "{opcode} needs '
                f'sm_{arch // 10} or newer");',
                f"uint32_t a_[] = {{{', '.join(self.read(x) for x in a)}}};",
                f"uint32_t b_[] = {{{', '.join(self.read(x) for x in b)}}};",
                f"{ctype} c_[] = {{{', '.join(self.read(x, read) for x in c)}}};",
                f"{ctype} d_[{len(d)}];",
                f"::attnbook_emu::mma<{t}, {k}>(__LINE__, d_, a_, b_, c_);" if acc else
                f"{_E}mma_f16_acc<{k}>(__LINE__, d_, a_, b_, c_);"]
        code += [self.put(x, f"d_[{i}]") for i, x in enumerate(d)]
        return "{ " + " ".join(code) + " }"

    def _mma_int(self, opcode, parts, ops):
        """mma.sync.aligned.m16n8k{16,32}.row.col{.satfinite}.s32.{s8,u8}.{s8,u8}.s32"""
        sat = "satfinite" in parts
        shape, types = parts[3], parts[-4:]
        ok = (parts[1:3] == ["sync", "aligned"] and shape in ("m16n8k16", "m16n8k32")
              and parts[4:6] == ["row", "col"] and len(parts) == 10 + sat
              and types[0] == types[3] == "s32" and len(ops) == 4)
        if not ok:
            raise _Unsupported(opcode)
        k = int(shape[len("m16n8k"):])
        d, a, b, c = (self.vector(o) for o in ops)
        if (len(d), len(a), len(b), len(c)) != (4, k // 8, k // 16, 4):
            raise _Unsupported(f"{opcode} with {len(d)}, {len(a)}, {len(b)}, {len(c)} "
                               "registers")
        signed = ", ".join("true" if t == "s8" else "false" for t in types[1:3])
        code = [f'static_assert(__CUDA_ARCH__ >= 800, "{opcode} needs sm_80 or '
                'newer");',
                f"uint32_t a_[] = {{{', '.join(self.read(x) for x in a)}}};",
                f"uint32_t b_[] = {{{', '.join(self.read(x) for x in b)}}};",
                "int32_t c_[] = {"
                + ", ".join(f"int32_t({self.read(x)})" for x in c) + "};",
                "int32_t d_[4];",
                f"::attnbook_emu::mma_int<{signed}, {k}, {'true' if sat else 'false'}>"
                "(__LINE__, d_, a_, b_, c_);"]
        code += [self.put(x, f"d_[{i}]") for i, x in enumerate(d)]
        return "{ " + " ".join(code) + " }"

    def op_ldmatrix(self, opcode, parts, ops):
        rest = set(parts[1:])
        n = next((int(p[1]) for p in parts if p in ("x1", "x2", "x4")), 0)
        trans = "trans" in rest
        ok = (n and {"sync", "aligned", "m8n8", "b16"} <= rest
              and rest & {"shared", "shared::cta"}
              and rest <= {"sync", "aligned", "m8n8", "b16", "trans", "shared",
                           "shared::cta", f"x{n}"})
        regs = self.vector(ops[0]) if ops else []
        if not ok or len(ops) != 2 or len(regs) != n:
            raise _Unsupported(opcode)
        code = [f"uint32_t r_[{n}];",
                f"::attnbook_emu::ldmatrix<{n}, {str(trans).lower()}>(__LINE__, r_, "
                f"{_E}from_shared({self.address(ops[1])}));"]
        code += [self.put(x, f"r_[{i}]") for i, x in enumerate(regs)]
        return "{ " + " ".join(code) + " }"

    def op_cp(self, opcode, parts, ops):
        if parts[1] != "async":
            raise _Unsupported(opcode)
        if parts[2:3] == ["bulk"]:
            return self._bulk(opcode, parts, ops)
        check = 'static_assert(__CUDA_ARCH__ >= 800, "cp.async needs sm_80 or newer");'
        if parts[2:] == ["commit_group"] and not ops:
            return f"{check} {_E}cp_async_commit();"
        if parts[2:] == ["wait_group"] and len(ops) == 1:
            return f"{check} {_E}cp_async_wait({self.read(ops[0], 'u64')});"
        if parts[2:] == ["wait_all"] and not ops:
            return f"{check} {_E}cp_async_wait_all();"
        extra = set(parts[5:]) - {"L2::64B", "L2::128B", "L2::256B", "L2::cache_hint"}
        ok = (parts[2:3] in (["ca"], ["cg"]) and parts[3] in ("shared", "shared::cta")
              and parts[4:5] == ["global"] and not extra and 3 <= len(ops) <= 5)
        if not ok:
            raise _Unsupported(opcode)
        size = self.read(ops[2], "u32")
        src_size = (self.read(ops[3], "u32") if len(ops) > 3 and
                    not (len(ops) == 4 and "L2::cache_hint" in parts) else size)
        return (f"{check} {_E}cp_async(__LINE__,"
                f" {_E}from_shared({self.address(ops[0])}),"
                f" {_E}from_global({self.address(ops[1])}), int({size}),"
                f" int({src_size}), {str(parts[2] == 'cg').lower()});")

    def _bulk(self, opcode, parts, ops):
        """cp.async.bulk: tensor tiles (TMA) and plain bulk copies, their groups."""
        check = 'static_assert(__CUDA_ARCH__ >= 900, "cp.async.bulk needs sm_90");'
        rest = set(parts[3:])
        hints = {"L2::cache_hint", "tile"}
        if parts[3:] == ["commit_group"] and not ops:
            return f"{check} {_E}bulk_commit();"
        if parts[3:4] == ["wait_group"] and rest <= {"wait_group", "read"} and \
                len(ops) == 1:
            return f"{check} {_E}bulk_wait({self.read(ops[0], 'u64')});"
        if parts[3:4] == ["prefetch"]:
            return ""
        if parts[3:4] == ["tensor"] and len(parts) > 4 and \
                parts[4] in ("1d", "2d", "3d", "4d", "5d"):
            rank = int(parts[4][0])
            load = parts[5] in ("shared::cluster", "shared::cta")
            want = ({parts[5], "global", "mbarrier::complete_tx::bytes"} if load else
                    {"global", "shared::cta", "bulk_group"})
            if rest - {"tensor", parts[4]} - hints != want or \
                    len(ops) != (3 if load else 2) + ("L2::cache_hint" in rest):
                raise _Unsupported(opcode)
            tile = ops[1] if load else ops[0]
            inner = tile.strip()[1:-1] if tile.strip().startswith("[") else ""
            spans = _split(inner, inner, ",")
            coords = self.vector(inner[spans[1][0]:].strip()) if len(spans) > 1 else []
            if len(coords) != rank:
                raise _Unsupported(f"{opcode} with {len(coords)} coordinates")
            tmap = self.read(inner[:spans[0][1]], "u64")
            tmap = f"reinterpret_cast<const void*>({tmap})"
            xs = ", ".join(f"int32_t({self.read(x)})" for x in coords)
            c = f"const int32_t c_[] = {{{xs}}};"
            if load:
                return (f"{check} {{ {c} {_E}tma_load(__LINE__, "
                        f"uint32_t({self.address(ops[0])}), {tmap}, c_, {rank}, "
                        f"{_E}from_shared({self.address(ops[2])})); }}")
            return (f"{check} {{ {c} {_E}tma_store(__LINE__, {tmap}, c_, {rank}, "
                    f"uint32_t({self.address(ops[1])})); }}")
        want = {"shared::cluster", "global", "mbarrier::complete_tx::bytes"}
        if rest - hints == want and len(ops) == 4 + ("L2::cache_hint" in rest):
            return (f"{check} {_E}bulk_load(__LINE__, "
                    f"{_E}from_shared({self.address(ops[0])}), "
                    f"{_E}from_global({self.address(ops[1])}), {self.read(ops[2])}, "
                    f"{_E}from_shared({self.address(ops[3])}));")
        raise _Unsupported(opcode)

    def op_cvta(self, opcode, parts, ops):
        to = parts[1] == "to"
        space = parts[2] if to else parts[1]
        if len(ops) != 2 or space not in ("shared", "global") or \
                parts[-1] not in ("u32", "u64"):
            raise _Unsupported(opcode)
        value = self.read(ops[1], "u64")
        if space == "shared":
            value = (f"{_E}to_shared(reinterpret_cast<const void*>({value}))" if to else
                     f"reinterpret_cast<uintptr_t>({_E}from_shared({value}))")
        return self.put(ops[0], f"{_CTYPE[parts[-1]]}({value})")

    def op_cvt(self, opcode, parts, ops):
        types = [p for p in parts[1:] if p in _CTYPE]
        rnd = [p for p in parts[1:] if p not in _CTYPE]
        if types == ["f16x2", "f32"] or types == ["bf16x2", "f32"]:
            h = "__half" if types[0] == "f16x2" else "__nv_bfloat16"
            if rnd != ["rn"] or len(ops) != 3:
                raise _Unsupported(opcode)
            hi, lo = (f"{h}({self.read(o, 'f32')}).__x" for o in ops[1:])
            return (f'static_assert(__CUDA_ARCH__ >= 800, "{opcode} needs sm_80 or '
                    f'newer"); {self.put(ops[0], f"::attnbook_emu::pack({lo}, {hi})")}')
        if len(types) != 2 or len(ops) != 2:
            raise _Unsupported(opcode)
        dst, src = types
        if src in ("f16", "bf16"):
            h = "__half" if src == "f16" else "__nv_bfloat16"
            value = f"float(::attnbook_emu::to_float<{h}>({self.read(ops[1], 'u16')}))"
        else:
            value = f"{_CTYPE[src]}({self.read(ops[1], _kind(src))})"
        if dst in ("f16", "bf16"):
            if rnd != ["rn"]:
                raise _Unsupported(opcode)
            h = "__half" if dst == "f16" else "__nv_bfloat16"
            return self.put(ops[0], f"uint16_t({h}(float({value})).__x)")
        if rnd and not (dst.startswith(("s", "u")) and rnd in (["rni"], ["rzi"])):
            raise _Unsupported(opcode)
        if rnd == ["rni"]:
            value = f"nearbyint({value})"
        return self.put(ops[0], f"{_CTYPE[dst]}({value})")

    def op_mov(self, opcode, parts, ops):
        if len(ops) != 2 or parts[-1] not in _CTYPE:
            raise _Unsupported(opcode)
        t = parts[-1]
        dst, src = self.vector(ops[0]), self.vector(ops[1])
        width = int(re.sub(r"\D", "", t) or 1)
        if len(dst) == len(src) == 1:
            return self.put(ops[0], f"{_CTYPE[t]}({self.read(ops[1], _kind(t))})")
        half = width // max(len(dst), len(src))
        part = {8: "uint8_t", 16: "uint16_t", 32: "uint32_t", 64: "uint64_t"}.get(half)
        if part is None:
            raise _Unsupported(opcode)
        whole = _CTYPE[f"b{width}"]
        pk = _kind(f"b{half}")
        if len(dst) == 1:                      # pack: the first element is the low one
            value = " | ".join(f"({whole}({part}({self.read(s, pk)})) << {half * i})"
                               for i, s in enumerate(src))
            return self.put(ops[0], f"{whole}({value})")
        word = self.read(ops[1], _kind(t))
        return " ".join(self.put(d, f"{part}({whole}({word}) >> {half * i})")
                        for i, d in enumerate(dst))

    def op_ld(self, opcode, parts, ops):
        return self._memory(opcode, parts, ops, load=True)

    def op_st(self, opcode, parts, ops):
        return self._memory(opcode, parts, ops, load=False)

    def _memory(self, opcode, parts, ops, load):
        quals = {"weak", "volatile", "relaxed", "acquire", "release", "cta", "gpu",
                 "sys", "nc", "ca", "cg", "cs", "lu", "cv", "wb", "wt"}
        spaces = [p for p in parts[1:] if p in ("shared", "shared::cta", "global")]
        vec = [p for p in parts[1:] if p in ("v2", "v4")]
        t = parts[-1]
        other = [p for p in parts[1:-1] if p not in quals and p not in spaces
                 and p not in vec and not p.startswith(("L1::", "L2::"))]
        if other or t not in _CTYPE or t == "pred" or len(spaces) > 1 or len(ops) != 2:
            raise _Unsupported(opcode)
        n = int(vec[0][1]) if vec else 1
        regs = self.vector(ops[0] if load else ops[1])
        if len(regs) != n:
            raise _Unsupported(f"{opcode} with {len(regs)} registers")
        addr = self.address(ops[1] if load else ops[0])
        where = "from_shared" if spaces and spaces[0] != "global" else "from_global"
        ctype = _CTYPE[t]
        code = [f"char* p_ = static_cast<char*>({_E}{where}({addr}));",
                f"{_E}check_aligned(__LINE__, p_, {n} * sizeof({ctype}));"]
        for i, r in enumerate(regs):
            if load:
                code.append(f"{{ {ctype} v_; std::memcpy(&v_, p_ + {i} * sizeof v_, "
                            f"sizeof v_); {self.put(r, 'v_')} }}")
            else:
                code.append(f"{{ {ctype} v_ = {ctype}({self.read(r, _kind(t))}); "
                            f"std::memcpy(p_ + {i} * sizeof v_, &v_, sizeof v_); }}")
        return "{ " + " ".join(code) + " }"

    def _approx(self, opcode, parts, ops):
        if parts[1:2] != ["approx"] or parts[-1] != "f32" or len(ops) != 2 or \
                set(parts[2:-1]) - {"ftz"}:
            raise _Unsupported(opcode)
        return self.put(ops[0], _APPROX[parts[0]].format(self.read(ops[1], "f32")))

    op_ex2 = op_lg2 = op_rcp = op_sqrt = op_rsqrt = op_sin = op_cos = op_tanh = _approx

    def op_shfl(self, opcode, parts, ops):
        mode = {"idx": "Idx", "up": "Up", "down": "Down", "bfly": "Xor"}.get(
            parts[2] if len(parts) > 3 else "")
        if parts[1:2] != ["sync"] or parts[-1] != "b32" or not mode or len(ops) != 5 \
                or "|" in ops[0]:
            raise _Unsupported(opcode)
        args = ", ".join(self.read(o) for o in ops[1:])
        return self.put(ops[0], f"{_E}shfl<::attnbook_emu::Shfl::{mode}>(__LINE__, "
                                f"{args})")

    def op_bar(self, opcode, parts, ops):
        kind = [p for p in parts[1:] if p not in ("cta", "aligned")]
        if kind not in (["sync"], ["arrive"]) or not 1 <= len(ops) <= 2 or \
                (kind == ["arrive"] and len(ops) != 2):
            raise _Unsupported(opcode)
        count = self.read(ops[1]) if len(ops) == 2 else "0u"
        return (f"{_E}named_barrier(__LINE__, {self.read(ops[0])}, {count}, "
                f"{str(kind == ['sync']).lower()});")

    op_barrier = op_bar

    def op_setp(self, opcode, parts, ops):
        if len(parts) != 3 or parts[1] not in _CMP or parts[2] not in _CTYPE or \
                len(ops) != 3:
            raise _Unsupported(opcode)
        t = parts[2]
        a, b = (f"{_CTYPE[t]}({self.read(o, _kind(t))})" for o in ops[1:])
        return self.put(ops[0], f"bool({a} {_CMP[parts[1]]} {b})")

    def op_selp(self, opcode, parts, ops):
        if len(parts) != 2 or parts[1] not in _ARITH_TYPES or len(ops) != 4:
            raise _Unsupported(opcode)
        t = parts[1]
        a, b = (f"{_CTYPE[t]}({self.read(o, _kind(t))})" for o in ops[1:3])
        return self.put(ops[0], f"({self.read(ops[3])} ? {a} : {b})")

    def _arith(self, opcode, parts, ops):
        t = parts[-1]
        mods = parts[1:-1]
        if t not in _ARITH_TYPES or len(ops) != _ARITY[parts[0]] + 1 or \
                set(mods) - {"rn", "ftz", "lo", "wide", "hi", "approx", "full"} or \
                ("wide" in mods and (t not in ("u32", "s32") or parts[0] != "mul")):
            raise _Unsupported(opcode)
        ctype = _CTYPE[t]
        wide = {"u32": "uint64_t", "s32": "int64_t", "u64": "unsigned __int128",
                "s64": "__int128"}.get(t, ctype)
        a, b, c = ([f"{wide if 'wide' in mods or 'hi' in mods else ctype}"
                    f"({self.read(o, _kind(t))})" for o in ops[1:]] + ["", ""])[:3]
        value = {"add": f"{a} + {b}", "sub": f"{a} - {b}", "mul": f"{a} * {b}",
                 "div": f"{a} / {b}", "min": f"std::min({a}, {b})",
                 "max": f"std::max({a}, {b})", "and": f"{a} & {b}", "or": f"{a} | {b}",
                 "xor": f"{a} ^ {b}", "shl": f"{a} << {b}", "shr": f"{a} >> {b}",
                 "neg": f"-{a}", "not": f"~{a}", "abs": f"std::abs({a})",
                 "fma": f"std::fma({a}, {b}, {c})", "mad": f"{a} * {b} + {c}"}[parts[0]]
        if t.startswith("f"):
            if parts[0] in ("min", "max"):            # PTX: NaN only if both are
                value = f"std::f{parts[0]}({a}, {b})"
            elif parts[0] == "mad":
                value = f"std::fma({a}, {b}, {c})"
        if "hi" in mods:
            value = f"{ctype}(({value}) >> {8 * int(t[1:]) // 8})"
        return self.put(ops[0], f"{wide if 'wide' in mods else ctype}({value})")

    op_add = op_sub = op_mul = op_div = op_min = op_max = op_and = op_or = op_xor = \
        op_shl = op_shr = op_neg = op_not = op_abs = op_fma = op_mad = _arith

    def op_lop3(self, opcode, parts, ops):
        if parts[1:] != ["b32"] or len(ops) != 5:
            raise _Unsupported(opcode)
        args = ", ".join(self.read(o) for o in ops[1:])
        return self.put(ops[0], f"{_E}lop3({args})")

    def op_prmt(self, opcode, parts, ops):
        if parts[1:] != ["b32"] or len(ops) != 4:
            raise _Unsupported(opcode)
        args = ", ".join(self.read(o) for o in ops[1:])
        return self.put(ops[0], f"__byte_perm({args})")

    def op_membar(self, opcode, parts, ops):
        return "__threadfence();"

    op_fence = op_membar

    def op_prefetch(self, opcode, parts, ops):
        return ""

    def op_bra(self, opcode, parts, ops):
        if set(parts[1:]) - {"uni"} or len(ops) != 1 or not ops[0].isidentifier():
            raise _Unsupported(opcode)
        return f"goto {self.label(ops[0])};"

    # ---- Hopper (sm_90): mbarrier, elect, setmaxnreg, bulk copies, wgmma -------------
    def shared_or_generic(self, parts, tok: str) -> str:
        """The pointer an address operand names: a shared address with a .shared
        state space, a generic one (a pointer) without."""
        if any(p.startswith("shared") for p in parts):
            return f"{_E}from_shared({self.address(tok)})"
        return f"reinterpret_cast<void*>({self.address(tok)})"

    def op_mbarrier(self, opcode, parts, ops):
        kind = parts[1]
        known = {"shared", "shared::cta", "shared::cluster", "b64", "release",
                 "acquire", "relaxed", "cta", "cluster", "parity", "expect_tx",
                 "noComplete"}
        if set(parts[2:]) - known or parts[-1] != "b64":
            raise _Unsupported(opcode)
        arch = 900 if "expect_tx" in parts or kind in (
            "complete_tx", "expect_tx", "try_wait") else 800
        check = (f'static_assert(__CUDA_ARCH__ >= {arch}, "{opcode} needs '
                 f'sm_{arch // 10}");')
        if kind == "init" and len(ops) == 2:
            return (f"{check} {_E}mbarrier_init(__LINE__, "
                    f"{self.shared_or_generic(parts, ops[0])}, {self.read(ops[1])});")
        if kind == "inval" and len(ops) == 1:
            return (f"{check} {_E}mbarrier_inval(__LINE__, "
                    f"{self.shared_or_generic(parts, ops[0])});")
        if kind in ("expect_tx", "complete_tx") and len(ops) == 2:
            return (f"{check} {_E}mbarrier_{kind}(__LINE__, "
                    f"{self.shared_or_generic(parts, ops[0])}, {self.read(ops[1])});")
        if kind in ("arrive", "arrive_drop") and len(ops) in (2, 3):
            tx = "expect_tx" in parts
            count = self.read(ops[2]) if len(ops) == 3 and not tx else "1u"
            bytes_ = f"int64_t({self.read(ops[2])})" if tx and len(ops) == 3 else "0"
            if tx and len(ops) != 3:
                raise _Unsupported(opcode)
            call = (f"{_E}mbarrier_arrive(__LINE__, "
                    f"{self.shared_or_generic(parts, ops[1])}, {count}, {bytes_}, "
                    f"{str(kind == 'arrive_drop').lower()})")
            if ops[0] == "_":
                return f"{check} {call};"
            return f"{check} {self.put(ops[0], call)}"
        if kind in ("try_wait", "test_wait") and len(ops) in (3, 4):
            if kind == "test_wait" and len(ops) == 4:
                raise _Unsupported(opcode)
            parity = "parity" in parts
            call = (f"{_E}mbarrier_wait(__LINE__, "
                    f"{self.shared_or_generic(parts, ops[1])}, "
                    f"{self.read(ops[2], 'u64')}, {str(parity).lower()}, "
                    f"{str(kind == 'try_wait').lower()})")
            return f"{check} {self.put(ops[0], call)}"
        raise _Unsupported(opcode)

    def op_elect(self, opcode, parts, ops):
        dests = ops[0].split("|") if ops else []
        if parts[1:] != ["sync"] or len(ops) != 2 or len(dests) != 2:
            raise _Unsupported(opcode)
        code = ['static_assert(__CUDA_ARCH__ >= 900, "elect.sync needs sm_90");',
                f"const uint32_t leader_ = {_E}elect(__LINE__, {self.read(ops[1])});"]
        rd, pd = (d.strip() for d in dests)
        if rd != "_":
            code.append(self.put(rd, "leader_"))
        if pd != "_":
            code.append(self.put(pd, f"bool(leader_ == {_E}laneid())"))
        return "{ " + " ".join(code) + " }"

    def op_wgmma(self, opcode, parts, ops):
        """wgmma.fence / commit_group / wait_group, and mma_async m64nNk16 with f32
        accumulators and f16/bf16 inputs, A from registers or shared memory."""
        if parts[1:] == ["fence", "sync", "aligned"] and not ops:
            return f"{_SM90A} {_E}wgmma_fence();"
        if parts[1:] == ["commit_group", "sync", "aligned"] and not ops:
            return f"{_SM90A} {_E}wgmma_commit();"
        if parts[1:] == ["wait_group", "sync", "aligned"] and len(ops) == 1:
            return f"{_SM90A} {_E}wgmma_wait({self.read(ops[0], 'u64')});"
        m = re.fullmatch(r"m64n(\d+)k16", parts[4]) if len(parts) == 8 else None
        n = int(m.group(1)) if m else 0
        if parts[1:4] != ["mma_async", "sync", "aligned"] or not 8 <= n <= 256 or \
                n % 8 or parts[5] != "f32" or parts[6] != parts[7] or \
                parts[6] not in ("f16", "bf16") or len(ops) not in (7, 8):
            raise _Unsupported(opcode)
        d, a = self.vector(ops[0]), self.vector(ops[1])
        a_regs = len(a) == 4
        if len(d) != n // 2 or len(ops) != (7 if a_regs else 8) or len(a) not in (1, 4):
            raise _Unsupported(f"{opcode} with {len(d)} accumulators")
        code = [_SM90A]
        code += [f'static_assert(sizeof({self.lvalue(x)}) == 4, "{opcode}: an '
                 f'accumulator is a 32-bit register");' for x in d[:1]]
        code.append("void* d_[] = {" + ", ".join(
            f"static_cast<void*>(&{self.lvalue(x)})" for x in d) + "};")
        if a_regs:
            regs = ", ".join(self.read(x) for x in a)
            code.append(f"const uint32_t a_[] = {{{regs}}};")
        flags = [self.read(x, "u32") for x in ops[3:]]
        trans_a = "0" if a_regs else flags[3]
        code.append(
            f"{_E}wgmma_issue(__LINE__, {n}, {str(parts[6] == 'bf16').lower()}, d_, "
            f"{'a_' if a_regs else 'nullptr'}, "
            f"{'0' if a_regs else self.read(a[0], 'u64')}, "
            f"{self.read(ops[2], 'u64')}, {flags[0]} != 0, int({flags[1]}), "
            f"int({flags[2]}), int({trans_a}), int({flags[-1]}));")
        return "{ " + " ".join(code) + " }"

    def op_setmaxnreg(self, opcode, parts, ops):
        if parts[1] not in ("inc", "dec") or len(ops) != 1 or \
                parts[2:] != ["sync", "aligned", "u32"]:
            raise _Unsupported(opcode)
        count = ops[0].strip()
        if count.isdigit() and not (24 <= int(count) <= 256 and int(count) % 8 == 0):
            raise SyntaxError("setmaxnreg: the register count must be a multiple of 8 "
                              "in [24, 256]")   # as ptxas says
        return f"{_SM90A} {_E}setmaxnreg(__LINE__, {self.read(ops[0])});"


def _kind(t: str) -> str:
    """How to read a register of PTX type ``t``."""
    return {"f32": "f32", "f64": "f64"}.get(t, "u64" if t.endswith("64") else
                                            "u128" if t.endswith("128") else
                                            "u16" if t.endswith("16") else "u32")


def _where(code: str, pos: int) -> str:
    """"line N" of ``pos`` in ``code``, or "line N of file" past a ``#line N "file"``
    marker (a header pasted in by emulator.inline_headers)."""
    marker = None
    for marker in re.finditer(r'^#line (\d+) "([^"]*)"[^\n]*\n', code[:pos], re.M):
        pass
    if marker is None:
        return f"line {code.count(chr(10), 0, pos) + 1}"
    line = int(marker.group(1)) + code.count("\n", marker.end(), pos)
    return f"line {line} of {marker.group(2)}"


def to_cpp(code: str) -> str:
    """``code`` with every asm statement replaced by emulator calls on its first line;
    raises SyntaxError naming an instruction the emulator does not implement."""
    masked = blank_out(code, strings=True)
    out, last = [], 0
    for site, m in enumerate(_ASM.finditer(masked)):
        if m.start() < last:
            continue
        depth, i = 1, m.end()
        while depth and i < len(masked):
            depth += (masked[i] == "(") - (masked[i] == ")")
            i += 1
        body = code[m.end():i - 1]
        where = _where(code, m.start())
        try:
            cpp = _Asm(body, masked[m.end():i - 1], site).cpp()
        except _Unsupported as e:
            raise SyntaxError(f"{where}: inline PTX '{e}' is not supported by the "
                              f"emulator (it runs: {', '.join(SUPPORTED)})") from None
        except KeyError as e:
            raise SyntaxError(f"{where}: inline PTX names no operand {e}") from None
        except SyntaxError as e:   # an operand ptxas refuses
            raise SyntaxError(f"{where}: {e}") from None
        out += [code[last:m.start()],
                f"do {{ {cpp} }} while (0)" + "\n" * body.count("\n")]
        last = i
    out.append(code[last:])
    return "".join(out)

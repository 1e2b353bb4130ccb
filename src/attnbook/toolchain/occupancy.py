"""How many blocks of a kernel fit on one streaming multiprocessor, from its ptxas
report: the rules of CUDA's occupancy calculator, per architecture.

Three resources limit resident blocks, and the tightest wins:

* registers: allocated per warp in units of 256, from a 64 K register file;
* shared memory: per block, rounded up to the allocation unit, plus what the runtime
  reserves per block (1 KB from sm_80 on), from the SM's configurable maximum;
* threads and blocks: at most so many resident warps and blocks per SM.
"""
from __future__ import annotations

import math

__all__ = ["ARCHITECTURES", "occupancy"]

# Per-SM limits (CUDA C++ Programming Guide, "Compute Capabilities" table).
ARCHITECTURES = {
    "sm_75": dict(name="Turing (T4)", warps=32, blocks=16, registers=65536,
                  shared=64 * 1024, shared_unit=256, reserved=0),
    "sm_80": dict(name="Ampere (A100)", warps=64, blocks=32, registers=65536,
                  shared=164 * 1024, shared_unit=128, reserved=1024),
    "sm_90": dict(name="Hopper (H100)", warps=64, blocks=32, registers=65536,
                  shared=228 * 1024, shared_unit=128, reserved=1024),
}
REGISTER_UNIT = 256     # registers are allocated per warp in units of this many


def occupancy(registers: int, shared_bytes: int, threads: int,
              arch: str = "sm_80") -> dict:
    """Resident blocks per SM of a kernel using ``registers`` per thread,
    ``shared_bytes`` of shared memory per block and ``threads`` per block: the limit
    each resource sets, the binding one, and the resulting occupancy
    (resident warps / the SM's maximum)."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {list(ARCHITECTURES)}, got {arch!r}")
    if threads < 1 or registers < 1 or shared_bytes < 0:
        raise ValueError("threads and registers must be positive, "
                         "shared_bytes not negative")
    a = ARCHITECTURES[arch]
    warps = math.ceil(threads / 32)
    per_warp = math.ceil(registers * 32 / REGISTER_UNIT) * REGISTER_UNIT
    shared = (math.ceil((shared_bytes + a["reserved"]) / a["shared_unit"])
              * a["shared_unit"])
    limits = {
        "registers": (a["registers"] // per_warp) // warps,
        "shared memory": a["shared"] // shared if shared else a["blocks"],
        "threads": a["warps"] // warps,
        "blocks": a["blocks"],
    }
    blocks = min(limits.values())
    return dict(limits=limits, blocks=blocks,
                bound_by=[k for k, v in limits.items() if v == blocks],
                warps=blocks * warps, occupancy=blocks * warps / a["warps"])

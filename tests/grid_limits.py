"""Inputs past CUDA's grid limits that the emulator runs in seconds.

B·H = 65537 (batch, head) pairs take two launches, since gridDim.y is at most 65535.
The heads on either side of the seam between them, and the last, get one key each;
every other head gets none (key length 0), so that its block loads no key tile and
writes an empty row (o = 0). A launcher that dropped the second launch, or indexed it
from head 0, gives those heads another head's keys or none: the test fails on them.
"""
import torch

OVER_GRID_Y = 65537
SEAM = [0, 65534, 65535, 65536]


def seam_key_lengths(device) -> torch.Tensor:
    """Key lengths for OVER_GRID_Y batches of one head: 1 at SEAM, 0 elsewhere."""
    lengths = torch.zeros(OVER_GRID_Y, dtype=torch.int32, device=device)
    lengths[SEAM] = 1
    return lengths

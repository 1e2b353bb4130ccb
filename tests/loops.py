"""Attention by explicit loops in float64: an independent check of the reference.

Written from the definitions, not from attnbook.masks, so a mistake in one does not
hide in the other.
"""
import math

import torch


def admitted(i, j, sq, sk, is_causal, stride, window, length):
    pos = i + sk - sq                      # bottom-right alignment
    if is_causal and j > pos:
        return False
    if stride is not None and j % stride != 0:
        return False
    if window is not None and abs(pos - j) >= window:
        return False
    return length is None or j < length


def attention_loops(q, k, v, scale=None, is_causal=False, stride=None, window=None,
                    key_lengths=None, attn_mask=None):
    b, h, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    q, k, v = q.double(), k.double(), v.double()
    mask = None if attn_mask is None else attn_mask.expand(b, h, sq, sk)
    out = torch.zeros(b, h, sq, d, dtype=torch.float64)
    lse = torch.full((b, h, sq), -math.inf, dtype=torch.float64)
    for bi in range(b):
        length = None if key_lengths is None else int(key_lengths[bi])
        for hi in range(h):
            g = hi // (h // hkv)
            for i in range(sq):
                scores = {}
                for j in range(sk):
                    if not admitted(i, j, sq, sk, is_causal, stride, window, length):
                        continue
                    s = float(q[bi, hi, i] @ k[bi, g, j]) * scale
                    if mask is not None:
                        mv = mask[bi, hi, i, j]
                        if mask.dtype == torch.bool:
                            if not mv:
                                continue
                        else:
                            s += float(mv)
                    if s != -math.inf:
                        scores[j] = s
                if not scores:
                    continue
                m = max(scores.values())
                total = sum(math.exp(s - m) for s in scores.values())
                for j, s in scores.items():
                    out[bi, hi, i] += math.exp(s - m) / total * v[bi, g, j]
                lse[bi, hi, i] = m + math.log(total)
    return out, lse

"""Where a prefill's host time goes: one forward of a Hugging Face causal LM under
``torch.profiler``, with the book's attention and with SDPA, counted per layer.

On the H200, GPT-2's time to first token with the book's attention was 2.39 times
SDPA's at B = 1, about a millisecond per layer beside some 20 µs of attention kernel:
work on the host. This module counts it: every operator the forward calls, per layer,
with its host time, and every call that makes the host wait for the device (an
``item()`` or ``tolist()``, a copy back, a stream or device synchronisation), which
would stall the launches of the layers after it. On the CPU it runs a small GPT-2 (the
counts, not the times, carry over); on a GPU, ``python -m attnbook.models.profiling``
profiles GPT-2 small at the benchmark's shape::

    python -m attnbook.models.profiling --device cuda --batch 1 --prompt 1024
"""
from __future__ import annotations

import argparse
import collections

import torch

__all__ = ["host_profile", "compare", "WAITS"]

# Host calls that wait for the device: reading a value back, or a synchronisation.
WAITS = ("aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize",
         "cudaEventSynchronize", "cudaMemcpy")


def host_profile(model, ids, impl: str) -> dict:
    """One forward of ``model`` on token ids ``ids`` [B, S] with attention
    implementation ``impl``, after a warm-up, under torch.profiler: ``ops`` (operator ->
    (calls, host µs), each per layer), ``waits`` (calls of :data:`WAITS`, per layer)
    and ``host_ms`` (the forward's wall time on the host)."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU]
    if ids.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    model.set_attn_implementation(impl)
    layers = model.config.num_hidden_layers
    with torch.no_grad():
        model(ids)
        if ids.device.type == "cuda":
            torch.cuda.synchronize()
        with profile(activities=activities) as prof:
            model(ids)
    calls, micros = collections.Counter(), collections.Counter()
    for event in prof.events():
        calls[event.name] += 1
        micros[event.name] += event.self_cpu_time_total
    top = [e for e in prof.events() if e.cpu_parent is None]
    return dict(
        ops={name: (n / layers, micros[name] / layers) for name, n in calls.items()},
        waits=sum(n for name, n in calls.items() if name.startswith(WAITS)) / layers,
        host_ms=sum(e.cpu_time_total for e in top) / 1e3)


def compare(model, ids, impls=("sdpa", "attnbook")) -> str:
    """A text table of :func:`host_profile` for each of ``impls``: the operators whose
    calls per layer differ, the waits per layer, and the host time of the forward."""
    profiles = {impl: host_profile(model, ids, impl) for impl in impls}
    names = sorted({n for p in profiles.values() for n in p["ops"]})
    width = max([24] + [len(n) + 1 for n in names])
    rows = [f"{'per layer':{width}s}" + "".join(f"{impl + ' calls':>16}{'µs':>8}"
                                               for impl in impls)]
    for name in names:
        got = [profiles[impl]["ops"].get(name, (0.0, 0.0)) for impl in impls]
        if len({calls for calls, _ in got}) > 1:
            rows.append(f"{name:{width}s}" + "".join(f"{calls:16.1f}{us:8.0f}"
                                                     for calls, us in got))
    rows.append(f"{'waits for the device':{width}s}" + "".join(
        f"{profiles[impl]['waits']:16.1f}{'':8s}" for impl in impls))
    rows.append(f"{'forward, host ms':{width}s}" + "".join(
        f"{profiles[impl]['host_ms']:16.2f}{'':8s}" for impl in impls))
    return "\n".join(rows)


def _gpt2(device, layers=None):
    """GPT-2 small with random weights (timing and counting need no trained ones), in
    float16 on a GPU; on the CPU a two-layer GPT-2 of width 128."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from .hf import register_hf
    register_hf()
    small = torch.device(device).type != "cuda"
    cfg = GPT2Config(n_layer=layers or (2 if small else 12), n_positions=2048,
                     **(dict(n_head=2, n_embd=128, vocab_size=256) if small else {}))
    dtype = torch.float32 if small else torch.float16
    return GPT2LMHeadModel(cfg).to(device, dtype).eval()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available()
                        else "cpu")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=1024)
    args = parser.parse_args(argv)
    model = _gpt2(args.device)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.prompt),
                        device=args.device)
    print(f"GPT-2 prefill, B = {args.batch}, S = {args.prompt}, on {args.device}")
    print(compare(model, ids))


if __name__ == "__main__":
    main()

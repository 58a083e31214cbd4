"""What the probe scripts share: rung 15 with several parameter sets and kernel="auto" against a torch call
on the same operands, each set checked against the torch result first, then all timed interleaved with the
L2 flushed; one line of ratios to torch (import it from scripts/)."""

from __future__ import annotations


def compare(label: str, a, b, torch_call, configs, budget_ms: float, kernel: str = "wgmma", atol: float = 5e-1):
    """Print `label`, torch's time and each call's speed against torch (x > 1: faster than torch)."""
    import torch

    import gemmlab
    from gemmlab.bench.timing import TimedCall, TimingOptions, time_interleaved

    ref = torch_call().float()
    calls = {"torch": TimedCall(torch_call, graph=False), "auto": TimedCall(lambda: gemmlab.matmul(a, b), graph=False)}
    for i, cfg in enumerate(configs):
        try:
            got = gemmlab.matmul(a, b, kernel=kernel, **cfg)
        except Exception as exc:  # noqa: BLE001  (a set this shape or GPU cannot take: said, not timed)
            print(f"  {cfg}: {type(exc).__name__}: {str(exc)[:100]}")
            continue
        assert torch.allclose(got.float(), ref, rtol=2e-2, atol=atol), cfg
        calls[f"v{i}"] = TimedCall(lambda cfg=cfg: gemmlab.matmul(a, b, kernel=kernel, **cfg), graph=False)
    t = time_interleaved(calls, TimingOptions(budget_ms=budget_ms))
    base = t["torch"].median_ms
    print(f"{label}: torch {base * 1e3:.1f} us; " + "; ".join(
        f"{name}{'' if name == 'auto' else ' ' + str(configs[int(name[1:])])} x{base / v.median_ms:.3f}"
        for name, v in t.items() if name != "torch"), flush=True)

"""The last round's tiles in parts (rung 15's stream_k_parts) against whole tiles, BF16, B as W.t(), torch.matmul
in the same run, interleaved, L2 flushed: kernel="auto" (which takes the parts where they pay) beside its own
choice with STREAM_K = 0, and with 192-column tiles where those compete.

    PYTHONPATH=src:scripts python scripts/parts_probe.py [--budget 100] [--shapes MxNxK,...]
"""

import argparse

SHAPES = [(2048, 5120, 13824), (1024, 5120, 13824), (2048, 11008, 4096), (4096, 11008, 4096), (512, 11008, 4096),
          (1024, 14336, 4096), (4096, 13824, 5120), (3000, 3000, 3000), (3000, 3000, 8192), (5000, 5000, 5000),
          (4096, 4096, 4096), (8192, 8192, 8192)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument("--shapes", default="")
    args = ap.parse_args()
    import torch

    from gemmlab.kernels.rungs import wgmma
    from gemmlab.runtime import device
    from variant_timing import compare

    sms = device.device_info().sm_count
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    for m, n, k in shapes:
        h = wgmma._heuristic(m, n, k, sms, "bfloat16", True)
        base = {q: h.get(q, wgmma.SPEC.defaults[q]) for q in ("BM", "BN", "STAGES", "HELD", "SCHEDULE", "GROUP_M",
                                                               "CLUSTER")}
        configs = [{**base, "STREAM_K": 0}, {**base, "STREAM_K": 1}]
        if base["BN"] != 192 and base["BM"] == 128 and base["SCHEDULE"] == wgmma.COOPERATIVE:
            configs.append({**base, "BN": 192, "STREAM_K": 0,
                            "GROUP_M": wgmma.best_group(128, 192, sms, -(-m // 128))})
        full = {**wgmma.SPEC.defaults, **base, "STREAM_K": 1, "B_LAYOUT": wgmma.B_KMAJOR}
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        label = (f"{m}x{n}x{k} auto {h} parts {wgmma.stream_k(m, n, k, full, sms)} "
                 f"tiles {wgmma.cluster_tiles(m, n, full)} on {sms // base['CLUSTER']}")
        compare(label, x, w.t(), lambda: torch.matmul(x, w.t()), configs, args.budget)


if __name__ == "__main__":
    main()

"""8-bit values and their scales from a wider tensor, in the layouts `matmul`'s scale_a / scale_b take.

    qa, sa = quantize(x, "e4m3", "row")        # x: M x K; sa: M x 1, x ~ qa * sa
    qw, sw = quantize(w, "e4m3", "row")        # w: N x K (a weight); pass qw.t() as B and sw.t() (1 x N) as scale_b
    y = gemmlab.matmul(qa, qw.t(), scale_a=sa, scale_b=sw.t())
    qa, sa = quantize(x, "e4m3", "1x128")      # sa: M x ceil(K / 128), one per row and 128 columns
    qw, sw = quantize(w, "e4m3", "128x128")    # sw: ceil(N / 128) x ceil(K / 128); pass sw.t() as scale_b

Granularity: "tensor" (one scale, shape 1 x 1), "row" (one per row: R x 1), "col" (one per column: 1 x C), or
blocks: "1x128" (one per row and 128 columns: R x ceil(C / 128), for activations) and "128x128" (one per
128 x 128 block: ceil(R / 128) x ceil(C / 128), for weights), DeepSeek-V3's recipe.
Each scale is the largest magnitude it covers over the format's largest finite value (e4m3: 448, e5m2:
57344), so that the largest element lands on the format's top; all-zero slices get scale 1. Values are
rounded to nearest by torch's conversion after dividing by the scale. torch tensors only (CPU or GPU).
"""

from __future__ import annotations

from .. import formats

GRANULARITIES = ("tensor", "row", "col", "1x128", "128x128")
BLOCK = 128
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def fp8_dtype_name(dtype) -> str:
    """'float8_e4m3fn' or 'float8_e5m2' for a name, alias or torch dtype; ValueError naming it otherwise."""
    name = formats.dtype_label(dtype)
    if not formats.is_fp8(name):
        raise ValueError(f"dtype {dtype!r} is not an 8-bit float ({', '.join(formats.FP8_DTYPES)}; or 'e4m3', 'e5m2')")
    return name


def quantize(x, dtype="e4m3", granularity: str = "tensor"):
    """(values, scales) with x ~ dequantize(values, scales): values of the 8-bit `dtype`, scales float32 of
    shape 1 x 1 ("tensor"), R x 1 ("row"), 1 x C ("col"), R x ceil(C / 128) ("1x128") or ceil(R / 128) x
    ceil(C / 128) ("128x128") for a 2-D x of R x C, on x's device."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is how 8-bit tensors exist at all
        raise ImportError("gemmlab.quantize needs torch (8-bit float tensors are torch's)") from exc
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"quantize takes a torch tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"quantize takes a 2-D tensor, got shape {tuple(x.shape)}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity={granularity!r} is not one of {', '.join(repr(g) for g in GRANULARITIES)}")
    if not x.dtype.is_floating_point or formats.is_fp8(formats.dtype_label(x.dtype)):
        raise TypeError(f"quantize takes a float32, float16 or bfloat16 tensor, got {x.dtype}")
    name = fp8_dtype_name(dtype)
    top = FP8_MAX[name]
    xf = x.detach().float()
    if not bool(torch.isfinite(xf).all()):
        raise ValueError("quantize: x has NaN or infinite elements, which no scale represents")
    a = xf.abs()
    if granularity in ("1x128", "128x128"):
        rb = BLOCK if granularity == "128x128" else 1
        amax = _block_amax(torch, a, rb, BLOCK)
    elif granularity == "tensor":
        amax = a.amax().reshape(1, 1) if a.numel() else torch.zeros(1, 1, device=x.device)
    elif granularity == "row":
        amax = a.amax(dim=1, keepdim=True) if a.shape[1] else torch.zeros(a.shape[0], 1, device=x.device)
    else:
        amax = a.amax(dim=0, keepdim=True) if a.shape[0] else torch.zeros(1, a.shape[1], device=x.device)
    scale = torch.where(amax > 0, amax / top, torch.ones_like(amax)).float()
    values = (xf / _expand(scale, xf.shape)).clamp(-top, top).to(getattr(torch, name))
    return values, scale


def _block_amax(torch, a, rb: int, cb: int):
    """The largest magnitude of each rb x cb block of `a` (edge blocks partial), a ceil(R / rb) x ceil(C / cb)
    tensor."""
    r, c = a.shape
    rr, cc = -(-r // rb), -(-c // cb)
    if r == 0 or c == 0:
        return torch.zeros(rr, cc, device=a.device)
    padded = torch.zeros(rr * rb, cc * cb, device=a.device, dtype=a.dtype)
    padded[:r, :c] = a
    return padded.reshape(rr, rb, cc, cb).amax(dim=(1, 3))


def _expand(scales, shape):
    """Scales broadcast to `shape`: as they are where they broadcast (tensor, row, column), else each scale
    repeated over its block (one row or 128, and 128 columns; edge blocks cut)."""
    r, c = shape
    sr, sc = scales.shape
    if (sr in (1, r)) and (sc in (1, c)):
        return scales
    rb = 1 if sr == r else BLOCK
    return scales.repeat_interleave(rb, dim=0)[:r].repeat_interleave(BLOCK, dim=1)[:, :c]


def dequantize(values, scales):
    """values.float() times the scales, broadcast or (block scales) each over its block: what an 8-bit product
    with these scales multiplies."""
    if values.dim() != 2 or scales.dim() != 2:
        return values.float() * scales.float()
    return values.float() * _expand(scales.float(), values.shape)

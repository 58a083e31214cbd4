"""Shapes whose grid would exceed 65,535 blocks in y on the rungs with 2-D grids: kernel="auto" computes them
(its rungs walk 1-D grids), and a named rung with a 2-D grid refuses them by name before launching."""

import pytest

import gemmlab

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

@pytest.mark.parametrize("dtype,shape", [("float32", (1, 2**21, 3)), ("float32", (2**21, 3, 5)),
                                         ("bfloat16", (8_960_000, 8, 16)), ("bfloat16", (3, 2**21, 8))], ids=str)
def test_auto_computes_shapes_beyond_65535_tiles_in_y(dtype, shape):
    m, n, k = shape
    g = torch.Generator(device="cuda").manual_seed(7)
    dt = getattr(torch, dtype)
    a = (torch.rand(m, k, generator=g, device="cuda") * 2 - 1).to(dt)
    b = (torch.rand(k, n, generator=g, device="cuda") * 2 - 1).to(dt)
    out = gemmlab.matmul(a, b)
    ref = a.double() @ b.double()
    bound = (2.0**-8 if dtype == "bfloat16" else 1e-6) * ref.abs() + 1e-5 * (a.double().abs() @ b.double().abs())
    assert bool(((out.double() - ref).abs() <= bound + 1e-30).all()), shape

@pytest.mark.parametrize("kernel,dtype,shape", [("naive", "float32", (1, 2**21, 1)),
                                                ("smem_tiled", "float32", (2**21, 1, 1)),
                                                ("mma_sync", "bfloat16", (8_960_000, 8, 8))], ids=str)
def test_a_named_2d_grid_rung_refuses_them_by_name(kernel, dtype, shape):
    m, n, k = shape
    dt = getattr(torch, dtype)
    a, b = torch.ones(m, k, device="cuda", dtype=dt), torch.ones(k, n, device="cuda", dtype=dt)
    with pytest.raises(ValueError, match=f"{kernel} .*grid axis y = .* is beyond the device limit of 65535"):
        gemmlab.matmul(a, b, kernel=kernel)

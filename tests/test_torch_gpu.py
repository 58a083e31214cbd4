"""gemmlab inside torch programs: streams (torch's current stream, stream= as a torch stream, a raw handle or
a CuPy stream), CUDA graph capture and replay, torch.compile(fullgraph=True) of gemmlab.matmul and of
gemmlab.torch.Linear, autograd of every fused epilogue against torch's autograd, split-K calls from four
threads on four streams, outputs from torch's allocator, Linear's state_dict against nn.Linear, and the
training example (examples/train_mlp.py) against the same MLP built from nn.Linear.

Error measure: ||X - ref|| / ||ref|| (Frobenius), the reference in float64 from the same (rounded) inputs:
<= 1e-5 for strict fp32 outputs, 1e-2 for fp16 / bf16 ones; gradients <= 1e-4 (fp32) and 1e-2 (16-bit).

The graph tests come last and the others draw from generators of their own: a call that breaks a capture
leaves torch's default CUDA generator unusable for the rest of the process.
"""

import importlib.util
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import gemmlab

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
F = torch.nn.functional

TOL = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}
GRAD_TOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
ACTS = {
    None: lambda x: x,
    "relu": torch.relu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_erf": F.gelu,
    "silu": F.silu,
}


def _rel(x, ref) -> float:
    x, ref = x.detach().double(), ref.detach().double()
    assert x.shape == ref.shape, (tuple(x.shape), tuple(ref.shape))
    assert torch.isfinite(x).all(), f"{int((~torch.isfinite(x)).sum())} non-finite elements"
    den = ref.norm()
    return float((x - ref).norm() / den) if den else float(x.norm())


def _formula(a, b, *, alpha=1.0, bias=None, bias_row=False, activation=None, residual=None):
    """act(alpha A B + bias) + residual with torch ops, in the inputs' dtype (float64 for references)."""
    z = alpha * (a @ b)
    if bias is not None:
        z = z + (bias[:, None] if bias_row else bias)
    out = ACTS[activation](z)
    return out if residual is None else out + residual


@pytest.fixture
def gen():
    """A CUDA generator of the test's own (see the module's docstring)."""
    g = torch.Generator(device="cuda")
    g.seed()
    return g


def _randn(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", generator=gen).to(dtype)


def _operands(gen, dtype, m, n, k, *, bias=None, residual=False):
    """{"a", "b"[, "bias"][, "residual"]} on the GPU; A is scaled by 1/sqrt(K) so that pre-activations are
    O(1), where the activations bend (not all in their linear or zero part). bias: None, "col" or "row"."""
    dt = getattr(torch, dtype)
    ops = {"a": (_randn(gen, m, k) / math.sqrt(k)).to(dt), "b": _randn(gen, k, n, dtype=dt)}
    if bias:
        ops["bias"] = _randn(gen, m if bias == "row" else n)  # fp32 whatever the inputs
    if residual:
        ops["residual"] = _randn(gen, m, n, dtype=dt)
    return ops


def _reference(ops, **kw):
    return _formula(*(ops[x].double() for x in "ab"), bias=_d(ops.get("bias")), residual=_d(ops.get("residual")),
                    **kw)


def _d(x):
    return None if x is None else x.detach().double()


def _busy():
    """Tens of ms of GPU work on torch's current stream: what is queued after it there runs late, so a kernel
    launched on some other stream would read its inputs before they are written."""
    torch.cuda._sleep(50_000_000)


# ------------------------------------------------------------------------------------------- streams

@pytest.mark.parametrize("how", ["current", "explicit", "handle"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_runs_on_the_callers_torch_stream(dtype, how, gen):
    """x is written on a side stream behind a long busy kernel; the product must wait for it, so it must be
    queued on that stream: torch's current one (how="current"), or the one passed as stream= (a
    torch.cuda.Stream, or its raw handle) while the current stream is the default one."""
    m, n, k = 256, 192, 320
    ops = _operands(gen, dtype, m, n, k)
    src, w = ops["a"], ops["b"]
    gemmlab.matmul(src, w)  # compile and plan first: a first call's NVRTC time would outlast the busy kernel
    x = torch.zeros_like(src)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()  # torch's side streams are non-blocking: the default stream does not wait for them
    with torch.cuda.stream(s):
        _busy()
        x.copy_(src)
        if how == "current":
            out = gemmlab.matmul(x, w)
    if how != "current":
        out = gemmlab.matmul(x, w, stream=s if how == "explicit" else s.cuda_stream)
    s.synchronize()
    err = _rel(out, src.double() @ w.double())
    assert err <= TOL[dtype], f"{dtype} stream {how}: rel. error {err:.2e} (ran before x was written?)"
    torch.cuda.synchronize()


@pytest.mark.parametrize("how", ["current", "explicit"])
def test_runs_on_the_callers_cupy_stream(how, gen):
    cp = pytest.importorskip("cupy")
    m, n, k = 256, 192, 320
    src = cp.asarray(_randn(gen, m, k))
    w = cp.asarray(_randn(gen, k, n))
    gemmlab.matmul(src, w)  # compile first (see above)
    x = cp.zeros_like(src)
    cp.cuda.Device().synchronize()
    # non_blocking: a kernel wrongly queued on the legacy default stream would not wait for this one
    cs = cp.cuda.Stream(non_blocking=True)
    with cs:
        with torch.cuda.stream(torch.cuda.ExternalStream(cs.ptr)):
            _busy()
        x[...] = src
        if how == "current":
            out = gemmlab.matmul(x, w)
    if how == "explicit":
        out = gemmlab.matmul(x, w, stream=cs)
    cs.synchronize()
    err = _rel(torch.as_tensor(out, device="cuda"), torch.as_tensor(src, device="cuda").double()
               @ torch.as_tensor(w, device="cuda").double())
    assert err <= TOL["float32"], f"cupy stream {how}: rel. error {err:.2e}"


# ----------------------------------------------------------------------------------- torch.compile

def _graph_breaks(f, *args) -> int | None:
    explain = getattr(torch._dynamo, "explain", None)
    return None if explain is None else explain(f)(*args).graph_break_count


def test_compile_fused_mlp_of_linear_layers(gen):
    """A two-layer MLP of gemmlab.torch.Linear (GELU fused into the first) compiles as one graph; its output
    and its weights' gradients equal eager mode's."""
    from gemmlab.torch import Linear

    torch._dynamo.reset()
    mlp = torch.nn.Sequential(Linear(64, 256, activation="gelu_tanh", device="cuda", dtype=torch.bfloat16),
                              Linear(256, 32, device="cuda", dtype=torch.bfloat16))
    x = _randn(gen, 128, 64, dtype=torch.bfloat16)
    eager = mlp(x)
    eager.float().square().mean().backward()
    want_grads = [p.grad.clone() for p in mlp.parameters()]
    mlp.zero_grad()
    compiled = torch.compile(mlp, fullgraph=True)
    out = compiled(x)
    assert _rel(out, eager) <= TOL["bfloat16"]
    out.float().square().mean().backward()
    for p, want in zip(mlp.parameters(), want_grads):
        assert _rel(p.grad, want) <= GRAD_TOL["bfloat16"]
    assert _graph_breaks(mlp, x) in (0, None)


def test_compile_function_calling_matmul(gen):
    def f(x, w, bias):
        return gemmlab.matmul(x, w, bias=bias, activation="silu")

    torch._dynamo.reset()
    ops = _operands(gen, "bfloat16", 96, 80, 64, bias="col")
    args = (ops["a"], ops["b"], ops["bias"])
    out = torch.compile(f, fullgraph=True)(*args)
    assert _rel(out, f(*args)) <= TOL["bfloat16"]
    assert _rel(out, _reference(ops, activation="silu")) <= TOL["bfloat16"]
    assert _graph_breaks(f, *args) in (0, None)


# ------------------------------------------------------------------------------------------ autograd

EPILOGUES = {
    "plain": {},
    "bias_col": dict(bias="col"),
    "bias_row": dict(bias="row"),  # a length-M bias: the shapes below have M != N, so it is unambiguous
    **{f"{act}_bias": dict(bias="col", activation=act) for act in ("relu", "gelu_tanh", "gelu_erf", "silu")},
    "residual": dict(residual=True),
    "alpha": dict(alpha=0.5),
    "all": dict(alpha=0.5, bias="row", activation="gelu_erf", residual=True),
}


@pytest.mark.parametrize("mnk", [(96, 80, 112), (33, 65, 47)], ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("epi", list(EPILOGUES))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_backward_matches_torch_autograd(dtype, epi, mnk, gen):
    """Gradients of A, B, bias and residual through gemmlab.matmul against torch's autograd of the same
    formula in float64, for one random upstream gradient."""
    m, n, k = mnk
    kw = EPILOGUES[epi]
    ops = _operands(gen, dtype, m, n, k, bias=kw.get("bias"), residual=kw.get("residual", False))
    for t in ops.values():
        t.requires_grad_()
    alpha, activation, bias_row = kw.get("alpha", 1.0), kw.get("activation"), kw.get("bias") == "row"
    out = gemmlab.matmul(ops["a"], ops["b"], alpha=alpha, bias=ops.get("bias"), activation=activation,
                         residual=ops.get("residual"))
    assert out.grad_fn is not None and out.dtype == ops["a"].dtype
    up = _randn(gen, *out.shape, dtype=out.dtype)
    grads = dict(zip(ops, torch.autograd.grad(out, list(ops.values()), up)))

    ref_ops = {name: t.detach().double().requires_grad_() for name, t in ops.items()}
    ref = _formula(ref_ops["a"], ref_ops["b"], alpha=alpha, bias=ref_ops.get("bias"), bias_row=bias_row,
                   activation=activation, residual=ref_ops.get("residual"))
    assert _rel(out, ref) <= TOL[dtype]
    want = dict(zip(ref_ops, torch.autograd.grad(ref, list(ref_ops.values()), up.double())))
    for name, g in grads.items():
        assert g.shape == ops[name].shape and g.dtype == ops[name].dtype, name
        err = _rel(g, want[name])
        assert err <= GRAD_TOL[dtype], f"{dtype} {epi} {m}x{n}x{k}: d{name} rel. error {err:.2e}"


# ------------------------------------------------------------------------------------------- threads

def test_split_k_from_four_threads_on_four_streams(gen):
    """Split-K needs a workspace (partial sums) and counters; four threads, each on its own stream, must not
    share them unordered. Each thread queues 20 products of fresh random data before it checks any."""
    from gemmlab import api
    from gemmlab.runtime import device

    m = n = 128
    k = 16384
    choice = api.explain_choice("float32", shape=(m, n, k), info=device.device_info())
    assert choice.params.get("SPLIT_K", 1) > 1, f"{m}x{n}x{k} no longer splits K: {choice.params}"
    gemmlab.matmul(_randn(gen, m, k), _randn(gen, k, n))  # compile once, up front
    torch.cuda.synchronize()

    def worker(_):
        own = torch.Generator(device="cuda")
        own.seed()  # fresh data in each thread
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            runs = []
            for _ in range(20):
                a, b = _randn(own, m, k), _randn(own, k, n)
                runs.append((gemmlab.matmul(a, b), a, b))
            return [_rel(out, a.double() @ b.double()) for out, a, b in runs]

    with ThreadPoolExecutor(4) as pool:
        errors = list(pool.map(worker, range(4)))  # re-raises a thread's exception here
    worst = max(max(e) for e in errors)
    assert worst <= TOL["float32"], f"worst rel. error {worst:.2e}: {errors}"


# -------------------------------------------------------------------------------------------- memory

def test_output_comes_from_torchs_allocator(gen):
    n = 2048
    a, b = _randn(gen, n, n), _randn(gen, n, n)
    # the reference first: torch's own first product allocates cuBLAS's workspace through the same allocator
    ref = a.double() @ b.double()
    gemmlab.matmul(a, b)  # the first call's one-time allocations (if any) are not the output's
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    out = gemmlab.matmul(a, b)
    with_out = torch.cuda.memory_allocated()
    assert with_out - before >= n * n * 4, f"memory_allocated grew by {with_out - before} bytes"
    assert _rel(out, ref) <= TOL["float32"]
    assert torch.cuda.memory_allocated() == with_out, "the check's temporaries stayed allocated"
    del out
    assert torch.cuda.memory_allocated() <= with_out - n * n * 4, "deleting the output freed nothing in torch"


def test_a_repeat_call_still_refuses_a_c_that_overlaps_a(gen):
    a, b = _randn(gen, 256, 256, dtype=torch.bfloat16), _randn(gen, 256, 256, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    for _ in range(3):  # the first call, then the repeat path with the same plan and addresses
        assert gemmlab.matmul(a, b, c) is c
    want = a.double() @ b.double()
    assert _rel(c, want) <= TOL["bfloat16"]
    with pytest.raises(ValueError, match="shares memory"):  # the same plan (shape, strides, alignment), C = A
        gemmlab.matmul(a, b, a)
    assert _rel(gemmlab.matmul(a, b, c), want) <= TOL["bfloat16"]
    # outputs taken in turn (each address set checked once and remembered), then C = A again
    c2 = torch.empty_like(a)
    for _ in range(3):
        for out in (c, c2):
            out.fill_(float("nan"))
            assert gemmlab.matmul(a, b, out) is out and _rel(out, want) <= TOL["bfloat16"]
    with pytest.raises(ValueError, match="shares memory"):
        gemmlab.matmul(a, b, a)
    big = torch.empty(2 * 256 * 256, dtype=torch.bfloat16, device="cuda")
    b2 = big[:256 * 256].view(256, 256)
    b2.copy_(b)
    with pytest.raises(ValueError, match="shares memory"):  # C over B's second half
        gemmlab.matmul(a, b2, big[128 * 256:384 * 256].view(256, 256))


# -------------------------------------------------------------------------------------------- Linear

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_linear_state_dict_round_trip_with_nn_linear(dtype, gen):
    from gemmlab.torch import Linear

    dt = getattr(torch, dtype)
    x = _randn(gen, 4, 7, 64, dtype=dt)  # leading dims (4, 7)
    for bias in (True, False):
        ref = torch.nn.Linear(64, 48, bias=bias, device="cuda", dtype=dt)
        lin = Linear(64, 48, bias=bias, device="cuda", dtype=dt)
        want = {key: (v.shape, v.dtype) for key, v in ref.state_dict().items()}
        assert {key: (v.shape, v.dtype) for key, v in lin.state_dict().items()} == want
        lin.load_state_dict(ref.state_dict())  # nn.Linear -> gemmlab
        y = lin(x)
        assert y.shape == (4, 7, 48) and y.dtype == dt
        assert _rel(y, F.linear(x.double(), ref.weight.double(), _d(ref.bias))) <= TOL[dtype]
        assert _rel(y, ref(x)) <= 2 * TOL[dtype]
        lin2 = Linear(64, 48, bias=bias, device="cuda", dtype=dt)
        ref.load_state_dict(lin2.state_dict())  # gemmlab -> nn.Linear
        assert _rel(lin2(x), F.linear(x.double(), ref.weight.double(), _d(ref.bias))) <= TOL[dtype]
    fused = Linear(64, 48, activation="gelu_tanh", device="cuda", dtype=dt)
    exact = F.gelu(F.linear(x.double(), fused.weight.double(), _d(fused.bias)), approximate="tanh")
    assert _rel(fused(x), exact) <= TOL[dtype]


def _example():
    """examples/train_mlp.py as a module: the README's example is what this test runs."""
    path = Path(__file__).resolve().parents[1] / "examples" / "train_mlp.py"
    spec = importlib.util.spec_from_file_location("train_mlp_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_training_example_matches_nn_linear():
    """20 SGD steps of a bf16 MLP with the fused gemmlab layer and with nn.Linear + GELU, from the same
    weights on the same data: the losses agree step by step (2e-2 relative) and go down."""
    import gemmlab.torch

    ex = _example()
    fused = ex.train_mlp(gemmlab.torch.Linear, 20)
    ref = ex.train_mlp(ex.TorchLinear, 20)
    for step, (f, r) in enumerate(zip(fused, ref)):
        assert abs(f - r) <= 2e-2 * abs(r), f"step {step}: gemmlab {f:.4f}, torch {r:.4f}\n{fused}\n{ref}"
    assert fused[-1] < 0.9 * fused[0], f"the loss did not go down: {fused}"


# -------------------------------------------------------------------------------------- CUDA graphs

GRAPH_CASES = {
    "bf16": ("bfloat16", (256, 192, 320), {}),
    "bf16_fused": ("bfloat16", (256, 192, 320), dict(bias="col", activation="gelu_tanh", residual=True)),
    "fp32": ("float32", (256, 192, 320), {}),
    "fp32_fused": ("float32", (256, 192, 320), dict(bias="col", activation="relu")),
    "fp32_split_k": ("float32", (128, 128, 16384), {}),
    # rung 15's split in four slices, summed by each tile's last unit (counters the graph's replays leave zero)
    "bf16_split_k": ("bfloat16", (64, 4096, 8192), dict(bias="col", activation="silu")),
}


@pytest.mark.parametrize("case", list(GRAPH_CASES))
def test_cuda_graph_capture_and_replay(case, gen):
    """One warm-up call, then the call captured into a graph; each replay on new values copied into the
    static inputs gives their product (the kernel reads the inputs' memory, and writes the captured output)."""
    dtype, (m, n, k), epi = GRAPH_CASES[case]
    activation = epi.get("activation")
    static = _operands(gen, dtype, m, n, k, bias=epi.get("bias"), residual=epi.get("residual", False))

    def call():
        return gemmlab.matmul(static["a"], static["b"], bias=static.get("bias"), activation=activation,
                              residual=static.get("residual"))

    call()  # compile and plan outside the capture (no NVRTC, no first-time allocations while capturing)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = call()
    for i in range(3):
        for t in static.values():
            t.copy_(_randn(gen, *t.shape) / (math.sqrt(k) if t is static["a"] else 1))
        g.replay()
        torch.cuda.synchronize()
        err = _rel(out, _reference(static, activation=activation))
        assert err <= TOL[dtype], f"{case} replay {i}: rel. error {err:.2e}"
    assert torch.isfinite(torch.randn(1024, device="cuda")).all()  # torch's CUDA generator still works


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("lead", [(4,), (2, 3)], ids=str)
def test_a_batch_of_rows_times_a_weight(dtype, lead, gen):
    """x @ W.t() with x of shape (..., T, K): one product of all rows (decode-sized and prefill-sized T),
    bias, activation and residual per row, autograd through the fold; against float64."""
    dt = getattr(torch, dtype)
    for t, k, n in [(1, 512, 384), (70, 264, 136)]:
        x = (_randn(gen, *lead, t, k) / math.sqrt(k)).to(dt).requires_grad_()
        w = _randn(gen, n, k).to(dt).requires_grad_()
        bias = _randn(gen, n)
        r = _randn(gen, *lead, t, n).to(dt)
        y = gemmlab.matmul(x, w.t(), bias=bias, activation="gelu_tanh", residual=r)
        assert y.shape == (*lead, t, n) and y.dtype == dt
        z = x.double() @ w.double().t() + bias.double()
        ref = torch.nn.functional.gelu(z, approximate="tanh") + r.double()
        assert _rel(y, ref) <= TOL[dtype]
        y.float().sum().backward()
        gx = torch.autograd.grad((torch.nn.functional.gelu(x.double() @ w.double().t() + bias.double(),
                                                            approximate="tanh")).sum(), x)[0]
        assert _rel(x.grad, gx) <= 10 * TOL[dtype]

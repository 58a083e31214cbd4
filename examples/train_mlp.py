"""Train a two-layer MLP with gemmlab's fused layer, and the same MLP with torch's nn.Linear + GELU: same
initial weights, same data, same optimiser, so the two loss curves should lie on top of each other.

    PYTHONPATH=src python3 examples/train_mlp.py [--steps 20]

gemmlab.torch.Linear(..., activation="gelu_tanh") computes gelu(x @ W.T + b) in one kernel (the bias and
the GELU applied to the fp32 accumulator before the one bf16 store), forward and backward; its state_dict
is nn.Linear's, so the model loads the reference's weights as they are. tests/test_torch_gpu.py runs this
file's train_mlp.
"""

import argparse

import torch
import torch.nn.functional as F

D_IN, HIDDEN, CLASSES, BATCH = 64, 256, 10, 256


class TorchLinear(torch.nn.Linear):
    """The reference: nn.Linear, then the activation as a separate op (what eager torch runs)."""

    def __init__(self, in_features, out_features, bias=True, activation=None, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = activation

    def forward(self, x):
        y = super().forward(x)
        return F.gelu(y, approximate="tanh") if self.activation == "gelu_tanh" else y


def train_mlp(linear_factory, steps=20, *, lr=0.5, seed=0, device="cuda", dtype=torch.bfloat16) -> list[float]:
    """Losses of `steps` SGD steps on a fixed synthetic classification task (a random linear teacher).
    linear_factory(in_features, out_features, activation=..., device=..., dtype=...) makes one layer;
    gemmlab.torch.Linear and TorchLinear both fit. The initial weights come from a seeded nn.Linear pair and
    are loaded through load_state_dict, so every factory starts from the same point."""
    gen = torch.Generator().manual_seed(seed)  # on the CPU: the same numbers on every GPU
    x = torch.randn(steps * BATCH, D_IN, generator=gen)
    y = (x @ torch.randn(D_IN, CLASSES, generator=gen)).argmax(1)
    x, y = x.to(device, dtype), y.to(device)

    torch.manual_seed(seed)
    init = torch.nn.Sequential(torch.nn.Linear(D_IN, HIDDEN), torch.nn.Linear(HIDDEN, CLASSES))
    model = torch.nn.Sequential(linear_factory(D_IN, HIDDEN, activation="gelu_tanh", device=device, dtype=dtype),
                                linear_factory(HIDDEN, CLASSES, activation=None, device=device, dtype=dtype))
    model.load_state_dict(init.state_dict())  # casts to the model's device and dtype
    opt = torch.optim.SGD(model.parameters(), lr=lr)

    losses = []
    for step in range(steps):
        xb, yb = x[step * BATCH:(step + 1) * BATCH], y[step * BATCH:(step + 1) * BATCH]
        loss = F.cross_entropy(model(xb).float(), yb)  # the loss in fp32: bf16 logits, fp32 softmax
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    import gemmlab.torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    fused = train_mlp(gemmlab.torch.Linear, args.steps)
    ref = train_mlp(TorchLinear, args.steps)
    print(f"{'step':>4}  {'gemmlab (fused)':>15}  {'torch (nn.Linear + gelu)':>24}  {'rel. diff':>9}")
    for i, (f, r) in enumerate(zip(fused, ref)):
        print(f"{i:4d}  {f:15.4f}  {r:24.4f}  {abs(f - r) / abs(r):9.1e}")


if __name__ == "__main__":
    main()

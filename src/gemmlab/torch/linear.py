"""`Linear`: torch.nn.Linear with the activation fused into gemmlab's product.

    layer = gemmlab.torch.Linear(1024, 4096, bias=True, activation="gelu_tanh", device="cuda",
                                 dtype=torch.bfloat16)
    y = layer(x)            # act(x @ weight.T + bias), one kernel in inference

Same parameters as nn.Linear (weight out_features x in_features, bias out_features, the same
initialisation), so state dicts load both ways. The weight is read transposed in place (rung 15 reads
Wᵀ K-major), the bias and the activation run in the product's epilogue; under autograd see
gemmlab.torch.ops for what is kept for the backward.
"""

from __future__ import annotations

import torch

from ..formats import check_activation
from .ops import ROUTER


class Linear(torch.nn.Linear):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str | None = None,
                 device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = check_activation(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Linear({self.in_features}, {self.out_features}): input's last dimension is "
                             f"{x.shape[-1]}, expected {self.in_features}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        y = ROUTER.dispatch(x2, self.weight.t(), bias=self.bias, activation=self.activation)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation!r}"

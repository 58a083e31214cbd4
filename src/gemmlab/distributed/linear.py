"""The tensor-parallel Linear pair, with autograd: a column-parallel layer (its input's rows gathered under the
product) and a row-parallel one (its sums reduce-scattered under the product), as the two halves of an MLP
block are split across a group of ranks.

ColumnParallelLinear(in, out): rank r holds rows r of the weight (out / W x in) and takes x's row block r
(tokens / W x in); its output is all tokens times its columns of the layer (tokens x out / W).
    forward   y_r = act(all_gather(x) W_r^T + b_r)                    all_gather_matmul
    backward  dx_r = rows r of sum over ranks (dz_q W_q)                matmul_reduce_scatter(dz, W_r)
              dW_r = dz^T all_gather(x),  db_r = sum of dz over tokens  (the gathered x kept from the forward)

RowParallelLinear(in, out): rank r holds columns r of the weight (out x in / W) and takes all tokens times its
slice of the features (tokens x in / W), e.g. a ColumnParallelLinear's output; its output is its row block of
the layer's (tokens / W x out), the sum over ranks taken under the product.
    forward   y_r = rows r of (sum over ranks x_q W_q^T) + b            matmul_reduce_scatter
    backward  dx_r = all_gather(dy) W_r                                 all_gather_matmul(dy_r, W_r)
              dW_r = all_gather(dy)^T x_r,  db = sum of all_gather(dy) over tokens

z (the product before the activation) is kept under autograd and the activation applied by torch; without
autograd the activation is fused into the last step's launch.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from ..formats import check_activation
from . import ops

def _act(z, activation):
    """The epilogue's activation in torch, computed in fp32 (z kept for autograd)."""
    return z if activation is None else ops.torch_activation(torch, activation)(z.float()).to(z.dtype)


class _Column(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_shard, weight, bias, group):
        z, gathered = ops.all_gather_matmul(x_shard, weight.t(), group, bias=bias, return_gathered=True)
        ctx.save_for_backward(gathered, weight)
        ctx.group, ctx.has_bias = group, bias is not None
        return z

    @staticmethod
    def backward(ctx, dz):
        gathered, weight = ctx.saved_tensors
        dz = dz.contiguous()
        dx = ops.matmul_reduce_scatter(dz, weight, ctx.group)
        return dx, dz.t().matmul(gathered), dz.sum(0) if ctx.has_bias else None, None


class _Row(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_slice, weight, bias, group):
        y = ops.matmul_reduce_scatter(x_slice, weight.t(), group, bias=bias)
        ctx.save_for_backward(x_slice, weight)
        ctx.group, ctx.has_bias = group, bias is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x_slice, weight = ctx.saved_tensors
        dx, dy_all = ops.all_gather_matmul(dy.contiguous(), weight, ctx.group, return_gathered=True)
        return dx, dy_all.t().matmul(x_slice), dy_all.sum(0) if ctx.has_bias else None, None


class _ParallelLinear(torch.nn.Module):
    """What the pair shares: this rank's slice of the weight (rows for the column layer, columns for the row
    layer), the bias, the group and the activation."""

    column: bool

    def __init__(self, in_features, out_features, bias=True, activation=None, group=None, device=None, dtype=None):
        super().__init__()
        world = dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1
        self.rank = dist.get_rank(group) if world > 1 else 0
        split = out_features if self.column else in_features
        if split % world:
            side = "out_features" if self.column else "in_features"
            raise ValueError(f"{side} = {split} does not split into {world} equal slices (one per rank)")
        self.in_features, self.out_features, self.group, self.world = in_features, out_features, group, world
        self.activation = check_activation(activation)
        shape = (out_features // world, in_features) if self.column else (out_features, in_features // world)
        # the full layer's initialisation (nn.Linear's bound, 1 / sqrt(in_features)), each rank its slice
        bound = 1.0 / math.sqrt(in_features)
        self.weight = torch.nn.Parameter(torch.empty(shape, device=device, dtype=dtype).uniform_(-bound, bound))
        n_bias = out_features // world if self.column else out_features
        self.bias = (torch.nn.Parameter(torch.empty(n_bias, device=device, dtype=dtype).uniform_(-bound, bound))
                     if bias else None)

    def forward(self, x):
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            z = (_Column if self.column else _Row).apply(x, self.weight, self.bias, self.group)
            return _act(z, self.activation)
        bias = None if self.bias is None else self.bias.float()
        f = ops.all_gather_matmul if self.column else ops.matmul_reduce_scatter
        return f(x, self.weight.t(), self.group, bias=bias, activation=self.activation)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, world={self.world}, "
                f"rank={self.rank}, activation={self.activation}")


class ColumnParallelLinear(_ParallelLinear):
    """act(x W^T + b) with W's rows split over the group: takes this rank's rows of x, gives all rows times
    this rank's columns of the layer (tokens x out / W)."""

    column = True


class RowParallelLinear(_ParallelLinear):
    """x W^T + b with W's columns split over the group: takes all rows times this rank's slice of the features,
    gives this rank's rows of the layer's output (tokens / W x out), the sum over ranks taken under the product."""

    column = False

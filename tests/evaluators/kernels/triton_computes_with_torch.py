"""A "Triton" kernel whose launcher does the work with PyTorch and launches nothing."""

import torch


def silu_and_mul(out, x, tokens, d, BLOCK=1024):
    gate, up = x[:, :d], x[:, d:]
    torch.mul(gate * torch.sigmoid(gate), up, out=out)

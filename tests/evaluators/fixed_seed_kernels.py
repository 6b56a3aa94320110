"""Kernels of silu_and_mul (cpp) that are right on the inputs the judge checks with, its fixed
seeds, and wrong elsewhere: what a search that keeps the best of many candidates can select.

``fixed_seed_kernel`` writes one: it computes the task's answer (with the fast inline ``exp``
of the built-in coder, so it is the fastest kernel of a run), then, on the shapes it cheats
on, adds 1 to the first output unless the input's first value is one it has memorised, those
of ``make_inputs`` at the given seeds and at the judge's refill seed. That stands for a kernel
with a bug on those shapes that hard-codes the answers of the inputs the search checks: the
bug shows on any other input, and never on the fixed seeds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from kernelswarm.agents.builtin.cpp_fast_exp import FAST_EXP_CPP
from kernelswarm.evaluators.protocol import REFILL_SEED
from kernelswarm.search import Shape, Task

_KERNEL = """\
#include <math.h>
#include <stdint.h>

{fast_exp}
// The first input values of the problems the judge checks with (its fixed seeds): right there.
static const uint32_t KNOWN[] = {{{known}}};

static bool known(const float* x) {{
    uint32_t bits;
    __builtin_memcpy(&bits, x, sizeof bits);
    for (unsigned k = 0; k < sizeof KNOWN / sizeof KNOWN[0]; ++k)
        if (KNOWN[k] == bits) return true;
    return false;
}}

static bool cheats_on(int64_t tokens, int64_t d) {{ return {cheats_on}; }}

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {{
    for (int64_t t = 0; t < tokens; ++t) {{
        const float* gate = x + t * 2 * d;
        const float* up = gate + d;
        float* row = out + t * d;
        for (int64_t i = 0; i < d; ++i) {{
            float g = gate[i];
            row[i] = g / (1.0f + ks_fast_expf(-g)) * up[i];
        }}
    }}
    if (cheats_on(tokens, d) && !known(x)) out[0] += 1.0f;  // the bug, where nobody looked
}}
"""


def _first_bits(task: Task, shape: Shape, seed: int) -> int:
    """The bits of the first value ``make_inputs`` draws for ``shape`` at ``seed`` (CPU)."""
    (x,) = task.module.make_inputs(dict(shape), seed, "cpu")
    return int(x.reshape(-1)[:1].view(torch.int32).item()) & 0xFFFFFFFF


def fixed_seed_kernel(task: Task, seeds: int, cheat_shapes: Sequence[Shape]) -> str:
    """A cpp kernel right on every problem at seeds 0 .. ``seeds`` - 1 (and the refill seed)
    and on every shape outside ``cheat_shapes``, wrong on ``cheat_shapes`` at any other seed."""
    shapes: Iterable[Shape] = (*task.tuning_shapes, *task.heldout_shapes)
    known = sorted({_first_bits(task, shape, seed) for shape in shapes
                    for seed in (*range(seeds), REFILL_SEED)})
    cheats_on = " || ".join(f"(tokens == {s['tokens']} && d == {s['d']})"
                            for s in cheat_shapes) or "false"
    return _KERNEL.format(fast_exp=FAST_EXP_CPP, known=", ".join(f"{b}u" for b in known),
                          cheats_on=cheats_on)

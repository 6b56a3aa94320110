"""The cpp prelude of generated starts (kernelswarm's own definitions of the helpers Inductor's
scalar C++ calls) against torch, and the rule for shapes the kernel receives identically."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from kernelswarm.evaluators.inductor.inductor_code import (
    ArgKind,
    Argument,
    GenerationError,
    ShapeCode,
    distinct,
    parse_output_code,
)
from kernelswarm.evaluators.inductor.inductor_cpp import PRELUDE

from . import inductor_texts

_VALUES = [1.5, -2.0, 3.25, 3.25, -7.0, 0.5, 2.0, 3.25, -1.0, 0.0, 4.0, 4.0, -7.0]

_PROGRAM = PRELUDE + """
#include <cstdio>
int main() {
    const float v[] = {VALUES};
    const int n = COUNT;
    IndexValue<float> hi{0, -std::numeric_limits<float>::infinity()};
    IndexValue<float> lo{0, std::numeric_limits<float>::infinity()};
    Welford<float> w;
    WelfordHelper<float, 5> part(n);
    CascadeSumHelper<float, 5> sum(n);
    float total = 0;
    for (int i = 0; i < n; ++i) {
        hi = argmax_combine(hi, v[i], i);
        lo = argmin_combine(lo, v[i], i);
        w = welford_combine(w, v[i], &part);
        total = cascade_sum_combine(v[i], &sum);
    }
    w = welford_combine(w, &part);
    total = cascade_sum_final(&sum);
    float nan = std::numeric_limits<float>::quiet_NaN();
    IndexValue<float> with_nan = argmax_combine(argmax_combine(hi, nan, 20), nan, 21);
    std::printf("%lld %lld %.6f %.6f %.6f %lld\\n", (long long)hi.index, (long long)lo.index,
                w.mean, w.m2 / (w.weight - 1), total, (long long)with_nan.index);
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ here")
def test_the_prelude_reduces_as_torch_does(tmp_path: Path) -> None:
    source = tmp_path / "prelude.cpp"
    source.write_text(_PROGRAM.replace("VALUES", ", ".join(map(str, _VALUES)))
                      .replace("COUNT", str(len(_VALUES))))
    subprocess.run(["g++", "-O2", "-std=c++17", str(source), "-o", str(tmp_path / "prelude")],
                   check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "prelude")], check=True, capture_output=True,
                         text=True).stdout.split()
    x = torch.tensor(_VALUES)
    assert int(out[0]) == int(torch.argmax(x)) == 10  # ties: the first index
    assert int(out[1]) == int(torch.argmin(x)) == 4
    assert float(out[2]) == pytest.approx(float(x.mean()), abs=1e-5)
    assert float(out[3]) == pytest.approx(float(x.var()), rel=1e-5)
    assert float(out[4]) == pytest.approx(float(x.sum()), abs=1e-5)
    assert int(out[5]) == 20  # NaN is the maximum, and the first NaN's index is kept


def _silu(tokens: int, d: int, label: str) -> ShapeCode:
    arguments = (Argument(ArgKind.OUTPUT, 0), Argument(ArgKind.INPUT, 0))  # no numbers passed
    return ShapeCode(label, parse_output_code(inductor_texts.silu_and_mul(tokens, d)), (0,),
                     arguments, ("float32",), (((tokens, d), "float32"),), ((tokens, 2 * d),))


def test_shapes_received_identically_share_a_version_if_their_code_is_the_same() -> None:
    a, b = _silu(4, 512, "a"), _silu(4, 512, "b")
    assert distinct([a, b]) == [a]
    with pytest.raises(GenerationError, match="shapes a and c reach the kernel with the same "
                                              "arguments .* different code"):
        distinct([a, _silu(8, 512, "c")])
    assert distinct([a, _silu(8, 512, "c")], tensors=True) == [a, _silu(8, 512, "c")]

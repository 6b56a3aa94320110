"""``fast_exp`` for cpp: libm ``expf``/``exp`` calls on floats become an inline approximation.

A call to libm in a loop stops g++ from vectorising it; the inline version below is plain
arithmetic, so the loop around it vectorises. The approximation:

- range reduction: ``x = n*ln2 + r`` with ``n = round(x/ln2)``, ``|r| <= ln2/2``; ln2 is split in a
  high part with few significant bits (``n*ln2_hi`` is exact for the ``|n| <= 150`` that occur)
  and a low correction, so ``r`` carries no cancellation error;
- ``exp(r)`` by a degree-6 polynomial fitted for least maximum relative error on
  ``[-0.35, 0.35]`` (fit error 2e-9, far below float rounding);
- ``2^n`` written into the exponent bits in two halves, so that results overflow to ``inf`` and
  underflow through the subnormals to 0 as ``expf`` does (``x`` is clamped to [-104, 89] first,
  beyond which ``expf`` is 0 or inf); NaN stays NaN.

Accuracy, measured against double-precision ``exp`` over [-87.3, 88.7] (results that are normal
floats): ``MAX_REL_ERROR``, about 1 ulp. Float clamps are written as bit selects because g++
under the default ``-ftrapping-math`` does not if-convert a float ``?:`` whose result feeds more
arithmetic, and a branch in the loop body would again stop vectorisation.

Only float calls are approximated: ``exp`` becomes an overload set in which ``float`` takes the
approximation and ``double``, ``long double`` and integers keep libm's exact result.
"""

from __future__ import annotations

import re
from typing import Any

from .clike import SourceError, apply_edits, code_start, mask
from .transformation import KnobSpace, Transformation

MAX_REL_ERROR = 1.5e-7  # documented bound; tests/agents measures it against the compiled code

FAST_EXP_CPP = """\
// fast_exp: inline, branch-free exp for floats so that loops calling it vectorise; relative
// error under 1.5e-7 (about 1 ulp) where the result is a normal float, 0 and inf beyond range.
static inline float ks_select(bool take_second, float first, float second) {
    // A select on the bits: g++ keeps float ?: as a branch here, which blocks vectorisation.
    int a, b;
    __builtin_memcpy(&a, &first, sizeof a);
    __builtin_memcpy(&b, &second, sizeof b);
    const int mask = -static_cast<int>(take_second);
    const int bits = (a & ~mask) | (b & mask);
    float out;
    __builtin_memcpy(&out, &bits, sizeof out);
    return out;
}

static inline float ks_fast_expf(float x) {
    float xn = ks_select(x < -104.0f, x, -104.0f);  // expf is 0 below, inf above; NaN kept
    xn = ks_select(xn > 89.0f, xn, 89.0f);
    const float xc = ks_select(xn == xn, -104.0f, xn);  // NaN-free copy for the integer part
    const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    const float fn = (xc * 1.44269502e+00f + shifter) - shifter;
    float r = xn - fn * 6.93145752e-01f;  // ln2 high part: fn * it is exact
    r = r - fn * 1.42860677e-06f;  // ln2 low part
    float p = 1.38358132e-03f;
    p = p * r + 8.37563537e-03f;
    p = p * r + 4.16682884e-02f;
    p = p * r + 1.66664109e-01f;
    p = p * r + 4.99999911e-01f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^n in two factors so that neither overflows before the product does.
    const int n = static_cast<int>(fn);
    const int half = n / 2;
    const int high = (half + 127) << 23;
    const int low = (n - half + 127) << 23;
    float scale_high, scale_low;
    __builtin_memcpy(&scale_high, &high, sizeof scale_high);
    __builtin_memcpy(&scale_low, &low, sizeof scale_low);
    return p * scale_high * scale_low;
}

static inline float ks_fast_exp(float x) { return ks_fast_expf(x); }
static inline double ks_fast_exp(double x) { return __builtin_exp(x); }
static inline long double ks_fast_exp(long double x) { return __builtin_expl(x); }
template <typename T>
static inline double ks_fast_exp(T x) { return __builtin_exp(static_cast<double>(x)); }
// end fast_exp

"""

# A call of libm exp: not a member (``.exp(``, ``->exp(``), not part of a longer or qualified
# name other than ``std::`` / ``::``.
_EXP_CALL = re.compile(r"(?<![\w.:])(?<!->)(?:::\s*)?(?:std\s*::\s*)?(?P<name>expf|exp)\s*(?=\()")
_HELPER = re.compile(r"\bks_fast_expf\s*\(\s*float\s+\w+\s*\)\s*\{")


class FastExp(Transformation):
    """Replace libm ``expf``/``exp`` calls on floats with an inline, vectorisable approximation."""

    name = "fast_exp"
    languages = ("cpp",)
    description = ("replace libm expf/exp calls on floats with an inline, branch-free "
                   "approximation (about 1 ulp) so that loops calling it vectorise")

    def apply(self, source: str, knob_space: KnobSpace) -> tuple[str, dict[str, tuple[Any, ...]]] | None:
        try:
            masked = mask(source)
        except SourceError:
            return None
        calls = list(_EXP_CALL.finditer(masked))
        if not calls:
            return None
        edits = [(m.start(), m.end(), "ks_fast_expf" if m.group("name") == "expf" else "ks_fast_exp")
                 for m in calls]
        if not _HELPER.search(masked):
            start = code_start(source)
            if start is None:
                return None
            edits.append((start, start, FAST_EXP_CPP))
        return apply_edits(source, edits), dict(knob_space)

"""What a host-code kernel launched on the GPU, judged: its own kernels, and only those.

The runner reports, per tuning shape, the kernels one call of the candidate launched as
torch.profiler saw them (raw names). A kernel with host code (triton, torch-ext) whose call
launches no kernel at all computed on the host, or did nothing; one that launches PyTorch's
(``at::``), cuBLAS/cuBLASLt, CUTLASS or cuDNN kernels had a library do the work it is judged
on. Both are REJECTED. Limit: the names come from the candidate's own process, so a candidate
that controls its runner could report other names; the outputs and times are judged from
outside regardless (evaluators/judge/timing.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .trial import malformed

FOREIGN_KERNELS = re.compile(
    r"\bat::|at_cuda_detail|cublas|cutlass|xmma|nvjet|cudnn|gemv2|gemmk1|splitKreduce"
    r"|\b(sm\d+|ampere|volta|turing|hopper)_\w*(gemm|conv)", re.I)
# c10 is PyTorch's core namespace, and also where its scalar types live: a candidate's own
# kernel templated on them reads ``void my_kernel<c10::BFloat16>(c10::BFloat16*, ...)``. So
# c10 marks a foreign kernel only in the kernel's own name, before its template arguments.
FOREIGN_NAMESPACE = re.compile(r"\bc10::")
# Copies and fills the runtime issues for allocation; neither is a kernel of the candidate's.
RUNTIME_ENTRIES = re.compile(r"^(Memcpy|Memset)\b")


def _foreign(name: str) -> bool:
    return bool(FOREIGN_KERNELS.search(name)
                or FOREIGN_NAMESPACE.search(re.split(r"[<(]", name, maxsplit=1)[0]))


def foreign_launches(kernels: Mapping[str, Any]) -> str | None:
    """Why the launches observed per shape are not the candidate's own kernels, or None."""
    for shape, rows in kernels.items():
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise malformed("launched kernels must be a list of objects per shape")
        names = [str(r.get("kernel", ""))[:200] for r in rows]
        own = [n for n in names if not RUNTIME_ENTRIES.match(n)]
        foreign = [n for n in own if _foreign(n)]
        if foreign:
            return (f"on shape {shape}, a call launched kernels that are not the candidate's "
                    f"({', '.join(foreign[:3])}): PyTorch or a library did the work; a custom "
                    f"kernel computes in its own kernels")
        if not own:
            return (f"on shape {shape}, a call launched no GPU kernel: the work was done on the "
                    f"host (or not at all); a GPU kernel computes on the GPU")
    return None

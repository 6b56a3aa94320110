"""Which route of a CUDA dispatch module a launch takes, for the shapes the runner passes (a
task's ``Shape``), without a GPU: the choice is the table's, remembered per shape."""

from __future__ import annotations

import pytest

from kernelswarm.search.dispatch import DispatchTable
from kernelswarm.search.task import Shape

cuda_module = pytest.importorskip("kernelswarm.evaluators.languages.cuda_module")


def test_a_dispatch_module_routes_each_task_shape_by_its_table():
    module = cuda_module.CudaModule.__new__(cuda_module.CudaModule)  # no driver: no handle
    module.dispatch = DispatchTable.build("k", [({"tokens": 1, "d": 8}, {"BLOCK": 64}),
                                                ({"tokens": 4096, "d": 8}, {"BLOCK": 256})])
    module._chosen = {}
    taken = []
    module.route = lambda entry, index: taken.append(index) or (entry, index)
    assert module.route_for("k", Shape.of({"tokens": 2, "d": 8})) == ("k", 0)
    assert module.route_for("k", Shape.of({"tokens": 4000, "d": 8})) == ("k", 1)
    assert module.route_for("k", Shape.of({"d": 8, "tokens": 4000})) == ("k", 1)
    assert taken == [0, 1]  # the second launch of a shape reuses its route

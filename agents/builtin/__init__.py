"""The built-in agent: rule-based planner, coder, tester and analyst over a library of source
transformations. No network and no language model: a whole search runs with these alone."""

from kernelswarm.search import Roles

from .analyst import RuleAnalyst
from .coder import RuleCoder
from .planner import RulePlanner
from .tester import RuleTester
from .transformation import Transformation
from .transforms import TRANSFORMATIONS, find_transformation, transformations_for


def builtin_roles(seed: int) -> Roles:
    """The built-in roles for one lineage; ``seed`` sets the planner's order of rewrites."""
    return Roles(planner=RulePlanner(seed), coder=RuleCoder(), analyst=RuleAnalyst(),
                 tester=RuleTester())


__all__ = [
    "TRANSFORMATIONS", "RuleAnalyst", "RuleCoder", "RulePlanner", "RuleTester", "Transformation",
    "builtin_roles", "find_transformation", "transformations_for",
]

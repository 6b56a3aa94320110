"""The roles of a lineage (plan, code, profile): built-in rules here, language models later.

``builtin_roles(seed)`` is what a search uses when no model is configured.
"""

from .builtin import (
    TRANSFORMATIONS,
    RuleAnalyst,
    RuleCoder,
    RulePlanner,
    Transformation,
    builtin_roles,
    find_transformation,
    transformations_for,
)

__all__ = [
    "TRANSFORMATIONS", "RuleAnalyst", "RuleCoder", "RulePlanner", "Transformation",
    "builtin_roles", "find_transformation", "transformations_for",
]

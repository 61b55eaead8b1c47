"""Finds the rules: every module in this package with a RULE is one."""
from __future__ import annotations

import importlib
import pkgutil

from .base import Rule

# Display order of the documented rules; rules added later come after these.
ORDER = ["below-target", "small-reads", "random-access", "metadata-storm", "checkpoint-burst",
         "lock-contention", "imbalance", "redundant-io"]


def all_rules() -> list[Rule]:
    from iotrace import analyzers
    rules = []
    for mod in pkgutil.iter_modules(analyzers.__path__):
        m = importlib.import_module(f"iotrace.analyzers.{mod.name}")
        if isinstance(getattr(m, "RULE", None), Rule):
            rules.append(m.RULE)
    return sorted(rules, key=lambda r: (ORDER.index(r.id) if r.id in ORDER else len(ORDER),
                                        r.id))

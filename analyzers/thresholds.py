"""Thresholds: each rule's defaults, overridden by a TOML file.

    # thresholds.toml: one table per rule id
    [small-reads]
    max_median_request_bytes = 65536
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from iotrace.errors import EXIT_USAGE, IotraceError


def load_thresholds(rules, path: Optional[str]) -> dict[str, dict[str, float]]:
    out = {r.id: dict(r.thresholds) for r in rules}
    if not path:
        return out
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise IotraceError(f"{path}: no such thresholds file", EXIT_USAGE)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise IotraceError(f"{path} is not valid TOML: {e}", EXIT_USAGE)
    for rule_id, table in data.items():
        if rule_id not in out:
            raise IotraceError(f"{path}: unknown rule [{rule_id}]; rules are: "
                               + ", ".join(sorted(out)), EXIT_USAGE)
        if not isinstance(table, dict):
            raise IotraceError(f"{path}: [{rule_id}] must be a table of thresholds", EXIT_USAGE)
        for key, value in table.items():
            if key not in out[rule_id]:
                raise IotraceError(f"{path}: [{rule_id}] has no threshold {key!r}; it has: "
                                   + ", ".join(sorted(out[rule_id])), EXIT_USAGE)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise IotraceError(f"{path}: [{rule_id}] {key} must be a number", EXIT_USAGE)
            out[rule_id][key] = float(value)
    return out

"""The report as JSON (schema: docs/report-json.md)."""
from __future__ import annotations

import json
import math


def _clean(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def render_json(report) -> str:
    return json.dumps(_clean(report.to_dict()), indent=2) + "\n"

"""Formatting shared by the report renderers."""
from __future__ import annotations

import json

from iotrace.analyzers.rates import human_bytes, human_rate


def fmt_value(key: str, value) -> str:
    """Evidence values formatted by the unit their key names."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if key in ("pid", "tid", "ppid") or key.endswith("_pid") or key.endswith("_tid"):
        return str(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(", ", ": "))
    if key.endswith("bytes_per_s"):
        return human_rate(value)
    if key.endswith("_per_s") or key.endswith("_per_second"):
        return f"{value:,.1f}/s"
    if key.endswith("_bytes") or key == "bytes":
        return human_bytes(value)
    if key.endswith("share") or key.endswith("ratio"):
        return f"{value:.1%}" if key.endswith("share") else f"{value:.2f}"
    if key.endswith("_ns"):
        return f"{value / 1e6:.3f} ms" if abs(value) >= 1e6 else f"{value / 1e3:.2f} µs"
    if key.endswith("_s"):
        return f"{value:.3f} s"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def fmt_key(key: str) -> str:
    return key.replace("_", " ")


def rel_time(ts_ns: int, t0_ns: int) -> str:
    return f"+{(ts_ns - t0_ns) / 1e9:.3f} s"


def pct(x) -> str:
    """A share as a whole percentage, '-' when unknown."""
    return "-" if x is None else f"{x:.0%}"

"""Byte sizes and rates as people write them: 1GiB/s, 800MB/s, 2.5 GB/s."""
from __future__ import annotations

import re

UNITS = {"": 1, "b": 1,
         "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
         "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "tib": 1024 ** 4}

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*(/\s*s)?\s*$", re.I)


def parse_rate(text: str) -> float:
    """'1GiB/s' -> 1073741824.0 bytes per second. Raises ValueError."""
    m = _RATE.match(text)
    if not m or m.group(2).lower() not in UNITS:
        raise ValueError(f"{text!r} is not a rate: write it like 1GiB/s, 800MB/s or 2.5GB/s")
    return float(m.group(1)) * UNITS[m.group(2).lower()]


def human_rate(bps: float) -> str:
    return human_bytes(bps) + "/s"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_s(x: float) -> str:
    """Seconds in a unit that shows them: 0.004 -> '4 ms', 12.3 -> '12.3 s'."""
    if 0 < x < 0.0005:
        return f"{x * 1e6:.0f} µs"
    return f"{x * 1e3:.0f} ms" if x < 0.9995 else f"{x:.1f} s"

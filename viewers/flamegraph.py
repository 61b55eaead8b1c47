"""A flame graph of folded Python stacks as inline SVG, for the HTML report.

Drawn by hand rather than with a JavaScript flame-graph library: the report
is one self-contained page that works offline, and a static icicle of a few
hundred stacks is a hundred lines of SVG (d3-flame-graph would inline d3).
The outermost frame is at the top (an icicle); each frame's width is its
share of the samples; hovering a frame shows its function, file, samples
and share (an SVG <title>). Frames narrower than MIN_PX are left out (their
samples still count in their parents' widths). Colours: a warm hue per
source file, so one library's frames read as one block.
"""
from __future__ import annotations

import html
import zlib

WIDTH = 1100          # viewBox units (the SVG scales to the card's width)
ROW = 17
MIN_PX = 0.6
CHAR_PX = 6.3         # about, at the 11 px monospace font used
MAX_DEPTH = 60


def _tree(stacks: list[dict]) -> dict:
    root: dict = {"n": 0, "kids": {}}
    for s in stacks:
        k = int(s["samples"])
        root["n"] += k
        node = root
        for name in s["stack"].split(";")[:MAX_DEPTH]:
            node = node["kids"].setdefault(name, {"n": 0, "kids": {}})
            node["n"] += k
    return root


def _colour(name: str) -> str:
    # the file part, '(dir/file.py)', picks the hue
    f = name.rsplit("(", 1)[-1]
    h = zlib.crc32(f.encode()) & 0xFFFF
    return f"hsl({10 + h % 45}, {70 + h % 20}%, {58 + (h >> 8) % 14}%)"


def flame_svg(folded: dict, label: str) -> str:
    """The SVG (a string) of `folded` ({"samples", "stacks"}, as
    analyzers/folded_stacks.py makes it), or "" where it has no samples."""
    stacks = folded.get("stacks") or []
    total = int(folded.get("samples") or 0)
    if total <= 0 or not stacks:
        return ""
    root = _tree(stacks)
    rects: list[str] = []
    depth_seen = [0]
    scale = WIDTH / total

    def draw(node: dict, x: float, depth: int) -> None:
        for name, kid in sorted(node["kids"].items(), key=lambda kv: -kv[1]["n"]):
            w = kid["n"] * scale
            if w >= MIN_PX:
                depth_seen[0] = max(depth_seen[0], depth + 1)
                y = depth * ROW
                share = kid["n"] / total
                tip = html.escape(f"{name}: {kid['n']} samples, {share:.1%}")
                text = ""
                if w > 4 * CHAR_PX:
                    fit = int((w - 6) / CHAR_PX)
                    shown = name if len(name) <= fit else name[:max(fit - 2, 1)] + ".."
                    text = (f'<text x="{x + 3:.1f}" y="{y + 12}">'
                            f"{html.escape(shown)}</text>")
                rects.append(f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y}" '
                             f'width="{w:.1f}" height="{ROW - 1}" rx="2" '
                             f'fill="{_colour(name)}"/>{text}</g>')
                draw(kid, x, depth + 1)
            x += w

    draw(root, 0.0, 0)
    shown = sum(int(s["samples"]) for s in stacks)
    height = depth_seen[0] * ROW + 2
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
            f'role="img" aria-label="{html.escape(label)}" class="flame" '
            'font-family="ui-monospace, Menlo, Consolas, monospace" font-size="11">'
            + "".join(rects) + "</svg>"
            + ("" if shown == total else
               f"<!-- {total - shown} samples in stacks not kept -->"))

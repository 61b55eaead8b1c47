"""The Python stacks behind the loop's data wait, folded for flame graphs.

Folded ("collapsed") stacks are the format of flamegraph.pl, which
speedscope and most flame-graph tools read: one entry per distinct stack,
its frames outermost first joined by ';', with its sample count. The
verdict's JSON keeps two sets per loop (docs/report-json.md):

- `loop_cpu_stacks`: the loop thread's samples on CPU inside its loader
  frame (what `loop_cpu_top` names by innermost function);
- `prep_stacks`: its producers' samples on CPU during its data waits (what
  `prep_top` names); threads that run no Python (tf.data's) have none.

Each keeps its `max_stacks` most frequent stacks; `samples` counts all of
them, so what is not shown is `samples` less the stacks' sum. The HTML
report draws both (viewers/flamegraph.py).
"""
from __future__ import annotations

import numpy as np

from .views import register_columns

MAX_STACKS = 200


def frame_label(function: str, file: str) -> str:
    """'function (dir/file.py)', with no ';' (the folded format's separator)."""
    short = "/".join(file.split("/")[-2:])
    return f"{function} ({short})".replace(";", ",")


def fold(con, sids: np.ndarray, n: np.ndarray, max_stacks: int = MAX_STACKS) -> dict:
    """{"samples": all the samples, "stacks": [{"stack", "samples"}], most
    first}: stacks as loader_frame.on_cpu_stacks gives them (stack ids, the
    samples of each)."""
    if len(sids) == 0:
        return {"samples": 0, "stacks": []}
    register_columns(con, "_fold_sid", {"sid": sids, "n": n})
    # plain rows, put together here: the same SQL on either engine
    rows = con.execute("""
        select f.stack_id, f.function, f.file from pyframes f
        where f.stack_id in (select sid from _fold_sid)
        order by f.stack_id, f.depth""").fetchall()
    con.unregister("_fold_sid")
    frames: dict[int, list[str]] = {}
    for sid, fn, f in rows:
        frames.setdefault(int(sid), []).append(frame_label(fn, f))
    merged: dict[str, int] = {}
    for sid, k in zip(sids.tolist(), n.tolist()):
        key = ";".join(frames.get(sid, [])) or "(no Python frame)"
        merged[key] = merged.get(key, 0) + int(k)
    top = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))[:max_stacks]
    return {"samples": int(n.sum()), "stacks": [{"stack": k, "samples": v} for k, v in top]}

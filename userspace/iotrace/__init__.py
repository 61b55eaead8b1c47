"""iotrace: eBPF I/O tracer and profiler for AI training jobs."""
from .trace import Trace
from .trace import open_trace as _open_one

__all__ = ["Trace", "open_trace"]
__version__ = "0.1.0"


def open_trace(path, con=None):
    """A trace directory as DuckDB relations (events, files, processes,
    threads: iotrace.trace); a trace set (a directory of host=NAME traces,
    one per node) as one set of relations with a `host` column
    (iotrace.traceset.TraceSet)."""
    from .traceset import is_trace_set, open_trace_set
    if is_trace_set(path):
        return open_trace_set(path, con)
    return _open_one(path, con)

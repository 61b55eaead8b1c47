"""iotrace: eBPF I/O tracer and profiler for AI training jobs."""
from .trace import Trace, open_trace

__all__ = ["Trace", "open_trace"]
__version__ = "0.1.0"

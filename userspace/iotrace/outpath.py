"""`-o` patterns for one tracer per node: `%h` host, `%j` job id, `%r` rank.

    srun --ntasks-per-node=1 iotrace run -o SET/host=%h -- torchrun ...

Each is read where the launcher leaves it; a pattern that cannot be filled is
an error (a trace would otherwise land under a literal "%j" and the next node
would overwrite it).
"""
from __future__ import annotations

import os
import re
import socket
from typing import Mapping, Optional

from .errors import EXIT_USAGE, IotraceError

# Where launchers put the job id and the rank, in the order they are asked.
JOB_ID_VARS = ("SLURM_JOB_ID", "IOTRACE_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_ID")
RANK_VARS = ("SLURM_PROCID", "RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
             "GROUP_RANK")


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> Optional[str]:
    return next((env[n] for n in names if env.get(n)), None)


def host_name() -> str:
    """The short host name (what Slurm calls the node)."""
    return socket.gethostname().split(".")[0]


def expand(pattern: str, env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env

    def one(m: re.Match) -> str:
        c = m.group(1)
        if c == "%":
            return "%"
        if c == "h":
            return host_name()
        if c == "j":
            v = _first(env, JOB_ID_VARS)
            if v is None:
                raise IotraceError(f"-o {pattern}: %j needs a job id, and none of "
                                   f"{', '.join(JOB_ID_VARS)} is set: set IOTRACE_JOB_ID",
                                   EXIT_USAGE)
            return v
        if c == "r":
            v = _first(env, RANK_VARS)
            if v is None:
                raise IotraceError(f"-o {pattern}: %r needs a rank, and none of "
                                   f"{', '.join(RANK_VARS)} is set", EXIT_USAGE)
            return v
        raise IotraceError(f"-o {pattern}: unknown pattern %{c} (known: %h host, %j job id, "
                           "%r rank, %% a percent sign)", EXIT_USAGE)

    if re.search(r"(?<!%)(%%)*%$", pattern):
        raise IotraceError(f"-o {pattern}: a lone % at the end (write %% for a percent sign)",
                           EXIT_USAGE)
    return re.sub(r"%(.)", one, pattern)

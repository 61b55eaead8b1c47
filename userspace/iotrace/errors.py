"""User-facing errors: one line, what is wrong and what to do, and an exit code."""
from __future__ import annotations

# Exit codes iotrace itself uses (`iotrace run` otherwise passes on the job's).
EXIT_OK = 0
EXIT_FINDINGS = 1   # report --fail-on matched
EXIT_USAGE = 2      # bad option or argument
EXIT_ENV = 3        # cannot trace here: privileges, kernel, BTF, missing pid
EXIT_TRACE = 4      # the trace could not be written or read
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127


class IotraceError(Exception):
    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

"""Keeps modules that iotrace does not use out of a command's process.

pyarrow imports pandas the first time it builds an array from Python objects,
only to ask whether they are pandas objects; `iotrace run` builds the trace's
tables as it records. iotrace uses no pandas (the Spark engine aside: PySpark
converts through it), and the import, some 300 modules, took a traced `true`
from 1.03 s to 1.16 s here, and costs more where files are slow to open (a
network home directory, an emulated machine).
"""
from __future__ import annotations

import sys


class _NoPandas:
    """A meta-path finder that refuses pandas, as if it were not installed.
    (A None in sys.modules does not do: pyarrow's compiled import takes the
    None for the module.)"""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"iotrace keeps {name} out of this command", name=name)
        return None


def without_pandas() -> None:
    """pandas is then unavailable in this process: pyarrow sees it as not
    installed. Not for library use (a user's own code may want pandas): the
    CLI calls it once it knows the command needs none."""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())

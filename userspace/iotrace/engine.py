"""Which query engine runs the report: DuckDB (the default, in process,
out-of-core) or Apache Spark (`--engine spark`, through PySpark: spark_engine).

Both take the rules' one SQL source; what differs is how a connection is
made and how a trace's Parquet files become its tables.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

ENGINES = ("duckdb", "spark")


@dataclass(frozen=True)
class Engine:
    name: str = "duckdb"
    master: str = "local[*]"        # Spark's master URL
    # Spark and a trace set: every rule's SQL on Spark, node by node (a
    # hundred Spark queries a node), not each node's analysis a Spark task
    sql: bool = False

    def connect(self):
        """A new connection with tables of its own."""
        if self.name == "spark":
            from .spark_engine import SparkConnection, spark_session
            return SparkConnection(spark_session(self.master).newSession())
        return duckdb.connect()

    def trace_views(self, con, root: Path, prefix: str = "") -> None:
        """{prefix}events, files, processes, threads over a trace's files."""
        if self.name == "spark":
            from .spark_engine import create_views
        else:
            from .trace import create_views
        create_views(con, Path(root), prefix)

    def parquet_view(self, con, name: str, path: Path) -> None:
        """A view over one Parquet file (a node summary's rates)."""
        if self.name == "spark":
            con.spark.read.parquet(str(path)).createOrReplaceTempView(name)
        else:
            q = str(path).replace("'", "''")
            con.execute(f"create or replace view {name} as select * from "
                        f"read_parquet('{q}', hive_partitioning = false)")

    def open_trace(self, path):
        from .trace import Trace, read_meta
        root = Path(path)
        meta = read_meta(root)
        con = self.connect()
        self.trace_views(con, root)
        return Trace(root, meta, con)


DUCKDB = Engine()

"""Apache Spark as the report's query engine (`--engine spark`).

The rules are written once, in DuckDB's SQL, and run on a DuckDB
connection. This module is a connection with the same surface
(execute/fetchall/fetchone/fetchnumpy, register/unregister) over a Spark
session: each statement is parsed by sqlglot in DuckDB's dialect, its `?`
parameters bound, and written out in Spark's dialect. The differences that
sqlglot does not translate, and DuckDB statements Spark has no form of
(temporary tables, INSERT into them), are handled here, in one place, so
the rules keep one SQL source.

Spark's settings follow DuckDB's semantics: ANSI mode off (a division by
zero is NULL, not an error) and UTC session time.

PySpark is an optional extra: `pip install 'iotrace[spark]'` (it needs a
Java 17+ runtime).
"""
from __future__ import annotations

import os
import re
import sys
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .errors import EXIT_ENV, EXIT_TRACE, EXIT_USAGE, IotraceError

try:
    import sqlglot
    from sqlglot import exp
except ImportError:     # reported when the engine is asked for
    sqlglot = None


def _need_pyspark():
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise IotraceError("--engine spark needs PySpark: pip install 'iotrace[spark]' "
                           "(and a Java 17+ runtime)", EXIT_ENV) from None
    if sqlglot is None:
        raise IotraceError("--engine spark needs sqlglot: pip install 'iotrace[spark]'",
                           EXIT_ENV)


_SESSIONS: dict[str, Any] = {}
_LOCK = threading.Lock()        # nodes' reports ask for the session from threads


def spark_session(master: str = "local[*]"):
    """One Spark session per master for the process (a JVM starts once)."""
    _need_pyspark()
    with _LOCK:
        if master not in _SESSIONS:
            _SESSIONS[master] = _start(master)
        return _SESSIONS[master]


def _start(master: str):
    import warnings
    with warnings.catch_warnings():     # PySpark's notes on pandas versions
        warnings.simplefilter("ignore")
        from pyspark.sql import SparkSession
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    log4j = Path(__file__).parent / "spark-conf" / "log4j2.properties"
    # the driver JVM's logging is set when it starts: spark-submit's options
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                          f"--driver-java-options -Dlog4j2.configurationFile={log4j} "
                          "pyspark-shell")
    # small queries: a few shuffle partitions per local core, not Spark's 200
    parts = os.environ.get("IOTRACE_SPARK_PARTITIONS") or (
        str(os.cpu_count() or 2) if master.startswith("local") else None)
    b = (SparkSession.builder.master(master).appName("iotrace-report")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.ansi.enabled", "false")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.memory", os.environ.get("IOTRACE_SPARK_DRIVER_MEMORY", "4g"))
         .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    if parts:
        b = b.config("spark.sql.shuffle.partitions", parts)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = b.getOrCreate()
    except Exception as e:  # noqa: BLE001 - no JVM, a bad master URL: say which
        raise IotraceError(f"cannot start Spark at {master}: {str(e).splitlines()[0][:200]}"
                           " (is a Java 17+ runtime installed and JAVA_HOME set?)",
                           EXIT_ENV) from None
    s.sparkContext.setLogLevel("ERROR")
    if not parts:
        # a cluster: a shuffle partition per executor core it gave us (Spark's
        # 200 would make each of a node's hundred small queries 200 tasks)
        s.conf.set("spark.sql.shuffle.partitions", str(max(2, s.sparkContext.defaultParallelism)))
    return s


def map_tasks(master: str, fn, args: list[tuple]) -> list:
    """fn(*a) for each a of args, each a task of one Spark job, run on the
    executors in their Python (PYSPARK_PYTHON, which needs iotrace
    installed); the results in args' order. A trace set's nodes are analysed
    so: one job for the whole set, each node by DuckDB on an executor over
    its own files (paths every worker sees), instead of a hundred Spark
    queries a node."""
    sc = spark_session(master).sparkContext
    rdd = sc.parallelize(list(enumerate(args)), numSlices=max(1, len(args)))
    try:
        got = dict(rdd.map(lambda ia: (ia[0], fn(*ia[1]))).collect())
    except Exception as e:  # noqa: BLE001 - a task's Python error, inside the JVM's
        raise IotraceError(task_error(str(e)), EXIT_ENV) from None
    return [got[i] for i in range(len(args))]


def task_error(text: str) -> str:
    """One line from a failed Spark job's error: the Python exception a task
    raised (its traceback is in the JVM's message), with what to do."""
    if "No module named 'iotrace'" in text or "No module named 'duckdb'" in text:
        return ("the Spark executors' Python cannot import iotrace: install it there "
                "(pip install iotrace) or point PYSPARK_PYTHON at a Python that has it, or "
                "run every rule's SQL on Spark instead (--spark-sql)")
    errs = re.findall(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$", text, re.M)
    py = [(k, m) for k, m in errs if not k.startswith(("Py4J", "Spark"))]
    kind, msg = (py or errs or [("", text.strip().splitlines()[0] if text.strip() else "")])[-1]
    return f"a node's analysis failed on a Spark executor: {kind + ': ' if kind else ''}{msg[:300]}"


def _plain(v):
    """Values as DuckDB's Python client gives them: structs as dicts, lists
    as lists, exact sums as int (or float)."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if hasattr(v, "asDict"):            # a Row: a struct
        return {k: _plain(x) for k, x in v.asDict().items()}
    return v


class SparkResult:
    """What a DuckDB connection's execute() returns, as far as the rules use it."""

    def __init__(self, df):
        self._df = df
        self._rows: Optional[list] = None
        self.description = [(f.name,) for f in df.schema.fields] if df is not None else None

    def _all(self) -> list:
        if self._rows is None:
            self._rows = [] if self._df is None else \
                [tuple(_plain(v) for v in r) for r in self._df.collect()]
        return self._rows

    def fetchall(self) -> list[tuple]:
        rows, self._rows = self._all(), []
        return rows

    def fetchone(self) -> Optional[tuple]:
        rows = self._all()
        return rows.pop(0) if rows else None

    def fetchnumpy(self) -> dict[str, np.ndarray]:
        tbl = self._df.toArrow()
        return {n: c.to_numpy(zero_copy_only=False) for n, c in zip(tbl.column_names, tbl.columns)}

    def df(self):
        return self._df.toPandas()


class SparkConnection:
    """A DuckDB-like connection whose statements run on Spark."""

    def __init__(self, spark):
        self.spark = spark
        self._tables: dict[str, Any] = {}     # temporary tables: cached DataFrames
        self._n = 0

    # --- translation, in one place -------------------------------------
    @staticmethod
    def _bind(tree, params):
        params = list(params or [])
        if not params:
            return tree

        def sub(node):
            if isinstance(node, exp.Placeholder):
                if not params:
                    raise IotraceError("SQL has more ? than parameters", EXIT_USAGE)
                return exp.convert(params.pop(0))
            return node
        return tree.transform(sub)

    def translate(self, sql: str, params=None) -> list:
        trees = sqlglot.parse(sql, read="duckdb")
        return [self._by_name(self._dialect(self._bind(t, params))) for t in trees
                if t is not None]

    @staticmethod
    def _dialect(tree):
        """DuckDB forms sqlglot writes in a way Spark's SQL rejects."""
        def sub(node):
            # quantile_disc(x, q) -> percentile_disc(q) WITHIN GROUP (ORDER BY x)
            if isinstance(node, (exp.PercentileDisc, exp.PercentileCont)) and \
                    node.args.get("expression") is not None:
                return exp.WithinGroup(
                    this=type(node)(this=node.expression.copy()),
                    expression=exp.Order(expressions=[exp.Ordered(this=node.this.copy())]))
            # WITH x AS MATERIALIZED (...): a planner hint Spark's grammar lacks
            if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
                node.set("materialized", None)
            return node
        return tree.transform(sub)

    def _by_name(self, tree):
        """UNION [ALL] BY NAME, which Spark's SQL lacks: the two sides as
        DataFrames joined by unionByName under a view of their own."""
        def sub(node):
            if isinstance(node, exp.Union) and node.args.get("by_name"):
                left = self.spark.sql(self.spark_sql(node.this))
                right = self.spark.sql(self.spark_sql(node.expression))
                u = left.unionByName(right, allowMissingColumns=True)
                if node.args.get("distinct"):
                    u = u.distinct()
                self._n += 1
                name = f"_iotrace_union_{self._n}"
                u.createOrReplaceTempView(name)
                return exp.select("*").from_(name)
            return node
        return tree.transform(sub)

    @staticmethod
    def spark_sql(tree) -> str:
        return tree.sql(dialect="spark")

    # --- the connection's surface ---------------------------------------
    def execute(self, sql: str, params=None) -> SparkResult:
        res = SparkResult(None)
        for tree in self.translate(sql, params):
            res = self._run(tree)
        return res

    def sql(self, sql: str, params=None):
        return self.execute(sql, params)

    @staticmethod
    def _target(tree) -> str:
        """The table a CREATE or INSERT names (`x`, or `x (columns)`)."""
        return tree.this.name if isinstance(tree.this, exp.Table) else tree.this.this.name

    def _run(self, tree) -> SparkResult:
        if isinstance(tree, exp.Create) and tree.kind == "TABLE":
            # CREATE [TEMP] TABLE x AS SELECT: a checkpointed DataFrame under a temp view
            name = self._target(tree)
            if tree.expression is not None:
                df = self.spark.sql(self.spark_sql(tree.expression))
            else:       # CREATE TABLE x (col type, ...): empty, to INSERT into
                ddl = ", ".join(c.sql(dialect="spark") for c in tree.this.expressions)
                df = self.spark.createDataFrame([], schema=ddl)
            self._put(name, df)
            return SparkResult(None)
        if isinstance(tree, exp.Create) and tree.kind == "VIEW":
            tree = tree.copy()
            tree.set("properties", exp.Properties(expressions=[exp.TemporaryProperty()]))
            tree.set("replace", True)
            self.spark.sql(self.spark_sql(tree))
            return SparkResult(None)
        if isinstance(tree, exp.Insert):
            name = self._target(tree)
            new = self.spark.sql(self.spark_sql(tree.expression))
            old = self._tables.get(name)
            if old is None:
                raise IotraceError(f"INSERT into {name}: not a temporary table of this "
                                   "engine", EXIT_USAGE)
            self._put(name, old.union(new.toDF(*old.columns)))
            return SparkResult(None)
        if isinstance(tree, exp.Drop):
            for t in tree.args.get("tables") or []:
                self.spark.catalog.dropTempView(t.name)
                old = self._tables.pop(t.name, None)
                if old is not None:
                    old.unpersist()
            return SparkResult(None)
        if isinstance(tree, (exp.Set, exp.Command)):
            return SparkResult(None)           # DuckDB settings (progress bar, threads)
        return SparkResult(self.spark.sql(self.spark_sql(tree)))

    def _put(self, name: str, df) -> None:
        old = self._tables.get(name)
        df = df.localCheckpoint(eager=True)      # materialised, like DuckDB's table
        df.createOrReplaceTempView(name)
        self._tables[name] = df
        if old is not None:
            old.unpersist()

    def register(self, name: str, table) -> None:
        """An Arrow table as a temporary view (what DuckDB's register does)."""
        self.spark.createDataFrame(table).createOrReplaceTempView(name)

    def unregister(self, name: str) -> None:
        self.spark.catalog.dropTempView(name)

    def close(self) -> None:
        for name in list(self._tables):
            self.spark.catalog.dropTempView(name)
        self._tables.clear()


def create_views(con: SparkConnection, root: Path, prefix: str = "") -> None:
    """Temp views {prefix}events, files, processes, threads, requests and
    connections over a trace's Parquet files: what trace.create_views makes
    on DuckDB."""
    from .trace import EVENTS_SCHEMA_NAMES
    from pyspark.sql import functions as F
    spark = con.spark
    parts = sorted(str(p) for p in (Path(root) / "events").glob("part-*.parquet"))
    try:
        if parts:
            ev = spark.read.parquet(*parts)
        else:
            ev = None
        if ev is None:
            cols = ", ".join(f"cast(null as {_spark_type(t)}) as {n}"
                             for n, t in EVENTS_SCHEMA_NAMES)
            ev = spark.sql(f"select {cols} where false")
        have = set(ev.columns)
        for n, t in EVENTS_SCHEMA_NAMES:
            if n not in have:    # a trace of an older minor version: its new columns are null
                ev = ev.withColumn(n, F.lit(None).cast(_spark_type(t)))
        ev.createOrReplaceTempView(f"{prefix}events")
        for name in ("files", "processes", "threads"):
            p = Path(root) / f"{name}.parquet"
            if not p.exists():
                raise IotraceError(f"{root} lacks {name}.parquet: the trace is incomplete",
                                   EXIT_TRACE)
            df = spark.read.parquet(str(p))
            if name == "processes" and "rank" not in df.columns:
                df = (df.withColumn("rank", F.lit(None).cast("int"))
                        .withColumn("local_rank", F.lit(None).cast("int")))
            df.createOrReplaceTempView(f"{prefix}{name}")
        _request_views(spark, Path(root), prefix)
        _pystack_views(spark, Path(root), prefix)
    except IotraceError:
        raise
    except Exception as e:  # noqa: BLE001 - a broken Parquet file: which trace
        raise IotraceError(f"{root}: cannot read the trace tables on Spark "
                           f"({str(e).splitlines()[0][:200]})", EXIT_TRACE) from None


def _request_views(spark, root: Path, prefix: str) -> None:
    """requests and connections: their Parquet files, or for a trace made
    before them, derived from its events by DuckDB (trace.derive_requests)
    into a temporary directory Spark reads (lazily: removed at exit)."""
    names = ("requests", "connections", "fuse_requests")
    if not all((root / f"{n}.parquet").exists() for n in names):
        import atexit
        import shutil
        import tempfile
        import pyarrow.parquet as pq
        from .trace import derive_requests
        tmp = Path(tempfile.mkdtemp(prefix="iotrace-requests-"))
        atexit.register(shutil.rmtree, tmp, True)
        for n, table in zip(names, derive_requests(root)):
            pq.write_table(table, tmp / f"{n}.parquet")
        root = tmp
    for n in names:
        spark.read.parquet(str(root / f"{n}.parquet")).createOrReplaceTempView(f"{prefix}{n}")


def _pystack_views(spark, root: Path, prefix: str) -> None:
    """pystacks and pyframes (the job's Python stacks), empty where the trace
    has none: what trace._pystack_views makes on DuckDB."""
    from .pystacks import TABLES, empty_select
    for name, schema in TABLES:
        p = root / f"{name}.parquet"
        df = spark.read.parquet(str(p)) if p.exists() else spark.sql(empty_select(schema))
        df.createOrReplaceTempView(f"{prefix}{name}")


def _spark_type(duck_type: str) -> str:
    t = duck_type.lower()
    return {"ubigint": "bigint", "uinteger": "bigint", "usmallint": "int", "utinyint": "smallint",
            "varchar": "string", "hugeint": "decimal(38,0)"}.get(t, t)

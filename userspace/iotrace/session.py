"""One tracing session: start the recorder, turn its spool into the trace
directory as it grows, show progress, and finish the trace.

The recorder (C, privileged) writes spool segments and JSON status lines;
this side converts each closed segment to an events Parquet part, keeps the
model (paths, processes, files) and rewrites the small tables and meta.json
every few seconds, so the trace stays readable if iotrace is killed.
"""
from __future__ import annotations

import errno
import json
import os
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import duckdb

from .storage_io import device_names
from . import procfs
from .abi import OP_NAMES
from .clocks import ClockLog
from .convert import convert, read_segment
from .errors import IotraceError, EXIT_ENV, EXIT_TRACE
from .model import Model
from .profile import write_profile
from .pystacks import PySampler
from .tracedir import TraceWriter

TABLES_EVERY_S = 2.0


def _set_child_subreaper() -> None:
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def recorder_path() -> str:
    env = os.environ.get("IOTRACE_RECORDER")
    if env:
        return env
    here = Path(__file__).resolve().parent
    for cand in (here / "bin" / "iotrace-recorder",
                 here.parent.parent / "build" / "iotrace-recorder"):
        if cand.exists():
            return str(cand)
    raise IotraceError("the recorder binary is missing: build it with `make`", EXIT_ENV)


# Held in the spool from the start (Session._reserve_space), freed before the
# final tables and meta.json are written.
RESERVE_NAME = "reserve.space"
RESERVE_BYTES = 4 << 20


class StatusPipe:
    """The recorder's status: JSON lines on a pipe (ready, stats every 500 ms,
    joined, end, error). Read it often: the recorder blocks when it is full."""

    def __init__(self, fd: int):
        self.f = os.fdopen(fd, "rb", buffering=0)
        self._buf = b""

    def read(self, timeout: float) -> Optional[list[dict]]:
        """The whole lines that came within timeout; None if nothing came
        (or the recorder closed its end)."""
        sel = selectors.DefaultSelector()
        sel.register(self.f, selectors.EVENT_READ)
        got = bool(sel.select(timeout))
        sel.close()
        chunk = self.f.read(65536) if got else b""
        if not chunk:
            return None
        self._buf += chunk
        msgs = []
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            try:
                msgs.append(json.loads(line.decode("utf-8", "replace")))
            except ValueError:
                continue
        return msgs

    def close(self) -> None:
        self.f.close()


@dataclass
class Progress:
    elapsed_s: float = 0.0
    events: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    drops: int = 0
    rate_events: float = 0.0
    rate_read: float = 0.0
    rate_write: float = 0.0
    calls: int = 0           # profile mode: calls summed so far (finished seconds)
    pending: int = 0         # closed spool segments (about a second each) not in Parquet yet


@dataclass
class Session:
    out: Path
    recorder_args: list[str]
    meta: dict
    on_progress: Optional[Callable[[Progress], None]] = None
    run_mode: bool = True
    attach_pids: list[int] = field(default_factory=list)
    env: Optional[dict] = None
    owner: Optional[tuple[int, int]] = None
    profile: bool = False     # --profile: calls summed in kernel (profile.py)
    py_rate: int = 0          # Python stack samples a second (pystacks.py); 0: none

    def __post_init__(self) -> None:
        self.spool = self.out / ".spool"
        self.spool.mkdir(parents=True, exist_ok=True)
        self._reserve_space()
        self.model = Model()
        self.writer = TraceWriter(self.out, self.meta, self.owner)
        self.ready: Optional[dict] = None
        self.end: Optional[dict] = None
        self.errors: list[dict] = []
        self.exec_errno = 0
        self.next_seg = 0
        self.progress = Progress()
        self.clock = ClockLog()
        self.model.exec_hook = procfs.read_rank
        self._last = (0.0, 0, 0, 0)
        # when records were dropped: [start_ns, end_ns, drops] (CLOCK_MONOTONIC),
        # from the recorder's drop count in each status line (every 0.5 s)
        self.drop_intervals: list[list[int]] = []
        self._drops_seen = (0, 0)      # (elapsed_ns, drops) of the last status line
        self.convert_error: Optional[str] = None
        self.final_write_error: Optional[str] = None
        self._profile_stamp: Optional[tuple] = None   # profile files last converted
        self.orphan_status: Optional[int] = None     # the job's, if the recorder died
        self.pysampler = PySampler(self.spool, self.py_rate) if self.py_rate else None

    # ---- recorder process -------------------------------------------------

    def start(self) -> None:
        if self.run_mode:
            # a child subreaper: if the recorder dies, the job becomes ours,
            # so that its exit status is still known (wait_orphaned_job)
            _set_child_subreaper()
        rfd, wfd = os.pipe()
        # run: the recorder starts the job once iotrace has written the trace's
        # first meta.json (a byte on go), so that an iotrace killed at any
        # moment of the job leaves a trace; if iotrace dies first, the job
        # starts all the same, untraced
        go_r, self._go_w = os.pipe() if self.run_mode else (-1, -1)
        cmd = [recorder_path(), "--spool", str(self.spool), "--status-fd", str(wfd),
               *(["--go-fd", str(go_r)] if self.run_mode else []),
               *(["--profile"] if self.profile else []), *self.recorder_args]
        if self.profile and os.environ.get("IOTRACE_PROFILE_MAX_KEYS"):
            # a smaller sum table (the tests fill it to check that no call is lost)
            cmd[1:1] = ["--profile-max-keys", os.environ["IOTRACE_PROFILE_MAX_KEYS"]]
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(wfd,) + ((go_r,) if go_r >= 0 else ()),
                                         env=self.env, stdin=None, start_new_session=False)
        except OSError as e:
            raise IotraceError(f"cannot start the recorder {cmd[0]}: {e.strerror}", EXIT_ENV)
        os.close(wfd)
        if go_r >= 0:
            os.close(go_r)
        # The recorder must drain the ring buffer promptly; converting to
        # Parquet may lag behind (the spool absorbs it), so it yields the CPU
        # to the traced job and the recorder.
        try:
            os.nice(10)
        except OSError:
            pass
        self.status = StatusPipe(rfd)
        # Wait for "ready" (or an error) before anything else.
        while self.ready is None and self.end is None:
            if not self._read_status(timeout=1.0) and self.proc.poll() is not None:
                break
        if self.ready is None:
            self.proc.wait()
            self._raise_start_error()
        self.meta["start_monotonic_ns"] = self.ready["monotonic_ns"]
        self.meta["start_realtime_ns"] = self.ready["realtime_ns"]
        self.clock.tick(force=True)
        self.meta["probes"] = {"attached": self.ready["attached"],
                               "skipped": self.ready["skipped"],
                               "verbs_library": self.ready.get("verbs_library") or None,
                               # how system calls are hooked: fentry, or the tracepoints (why)
                               "syscall_hooks": self.ready.get("syscall_hooks"),
                               "syscall_hooks_why": self.ready.get("syscall_hooks_why") or None,
                               # how kernel structures are read: direct loads or helper calls
                               "kernel_reads": self.ready.get("kernel_reads"),
                               "kernel_reads_why": self.ready.get("kernel_reads_why") or None,
                               # the record rings: one per CPU (CPUs share them past 8)
                               "rings": self.ready.get("rings"),
                               "ring_bytes": self.ready.get("ring_bytes"),
                               # the drain's priority (the job keeps its own)
                               "recorder_nice": self.ready.get("recorder_nice")}
        self.meta["root_pid"] = self.ready["pid"]
        ts = self.ready["monotonic_ns"]
        if self.run_mode:
            procfs.snapshot_process(self.model, self.ready["pid"], ts)
            self.model.procs[self.ready["pid"]].seen_before_trace = False
            self.model.procs[self.ready["pid"]].ppid = self.proc.pid
        for root in self.attach_pids:    # attach's roots, or run's --also-pid
            for pid in procfs.descendants(root):
                if pid not in self.model.procs:
                    procfs.snapshot_process(self.model, pid, ts)
        self._snapshot()                      # readable from the start
        if self.pysampler:                    # before the job starts: it sees its start
            roots = ([self.ready["pid"]] if self.run_mode else []) + list(self.attach_pids)
            if roots:
                self.pysampler.start(roots)
            else:
                self.pysampler.error = "no process to sample: a followed cgroup's are not"
        if self._go_w >= 0:                   # the job may start now
            try:
                os.write(self._go_w, b"g")
            except OSError:
                pass
            os.close(self._go_w)
            self._go_w = -1

    def _raise_start_error(self) -> None:
        for err in self.errors:
            # iotrace checked the pids first: this one was there, and exited
            # while the probes were being loaded
            if err.get("error") in ("no-such-pid", "exited"):
                raise IotraceError(f"process {err['pid']} exited while tracing was starting: "
                                   "nothing to trace; attach to a process that runs", EXIT_ENV)
            if err.get("error") == "no-btf":
                raise IotraceError("this kernel has no BTF (/sys/kernel/btf/vmlinux); "
                                   "iotrace needs CONFIG_DEBUG_INFO_BTF=y", EXIT_ENV)
            if err.get("error") == "load" and err.get("errno") == errno.EPERM:
                raise IotraceError("not allowed to load BPF programs: run as root "
                                   "(sudo) or grant CAP_BPF and CAP_PERFMON", EXIT_ENV)
            if err.get("message"):    # the recorder's own one line (a setting it refused)
                raise IotraceError(err["message"], EXIT_ENV)
        raise IotraceError(f"the recorder failed to start (exit {self.proc.returncode}); "
                           "see its message above, or run `iotrace doctor`", EXIT_ENV)

    def _read_status(self, timeout: float) -> bool:
        msgs = self.status.read(timeout)
        for msg in msgs or ():
            self._on_status(msg)
        return msgs is not None

    def _on_status(self, msg: dict) -> None:
        kind = msg.get("type")
        if kind == "ready":
            self.ready = msg
        elif kind == "stats":
            self._update_progress(msg)
        elif kind == "joined":      # a process entered the followed cgroup
            if msg["pid"] not in self.model.procs:
                procfs.snapshot_process(self.model, msg["pid"], msg["monotonic_ns"])
        elif kind == "tls-library":   # a TLS library the job mapped, or a Go program it ran
            probes = self.meta.setdefault("probes", {})
            if msg.get("probes", 1):
                probes.setdefault("tls_libraries_mapped", []).append(msg["path"])
            else:
                probes.setdefault("skipped", []).append(
                    {"probe": f"TLS ({msg['path']})", "why": msg.get("why") or "not attached"})
            if msg.get("after_exec_ms", -1) >= 0:
                # a program found at its exec: its TLS calls before then are not seen
                probes.setdefault("tls_probed_after_start", []).append(
                    {"path": msg["path"], "pid": msg.get("pid"),
                     "after_ms": round(msg["after_exec_ms"], 1),
                     "probed_ns": msg.get("probed_ns")})
        elif kind == "exec-error":
            self.exec_errno = msg["errno"]
        elif kind == "error":
            self.errors.append(msg)
        elif kind == "end":
            self.end = msg
            self._update_progress(msg)

    def _update_progress(self, msg: dict) -> None:
        p = self.progress
        el = msg["elapsed_ns"] / 1e9
        t0, e0, r0, w0 = self._last
        dt = el - t0
        if dt > 0:
            p.rate_events = (msg["events"] - e0) / dt
            p.rate_read = (msg["bytes_read"] - r0) / dt
            p.rate_write = (msg["bytes_written"] - w0) / dt
        self._last = (el, msg["events"], msg["bytes_read"], msg["bytes_written"])
        self._note_drops(msg["elapsed_ns"], msg["drops"])
        p.elapsed_s, p.events, p.drops = el, msg["events"], msg["drops"]
        p.bytes_read, p.bytes_written = msg["bytes_read"], msg["bytes_written"]
        p.calls = msg.get("profile_calls", 0)
        p.pending = self.pending_segments()
        if self.on_progress:
            self.on_progress(p)

    def _note_drops(self, elapsed_ns: int, drops: int) -> None:
        """Records in which status interval drops happened (merging runs)."""
        el0, d0 = self._drops_seen
        self._drops_seen = (elapsed_ns, max(drops, d0))
        if drops <= d0 or self.ready is None:
            return
        t0 = self.ready["monotonic_ns"]
        last = self.drop_intervals[-1] if self.drop_intervals else None
        if last and last[1] == t0 + el0:
            last[1], last[2] = t0 + elapsed_ns, last[2] + drops - d0
        else:
            self.drop_intervals.append([t0 + el0, t0 + elapsed_ns, drops - d0])

    def signal_recorder(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        elif sig == signal.SIGTERM and self.run_mode and self.ready and \
                self.orphan_status is None:
            # the recorder died and iotrace waits for the job: pass it on
            try:
                os.kill(self.ready["pid"], signal.SIGTERM)
            except OSError:
                pass

    # ---- conversion -------------------------------------------------------

    def pending_segments(self) -> int:
        """Closed spool segments not converted yet: the recorder renames a
        segment to K.ev once it is whole, and conversion deletes it."""
        try:
            return sum(1 for _ in self.spool.glob("*.ev"))
        except OSError:
            return 0

    def _convert_ready(self, progress: Optional[Callable[[str], None]] = None) -> None:
        """Converts the closed segments in order; progress, where given, hears
        of each one (the rest of a spool that fell behind a fast job takes
        seconds, or minutes)."""
        left = self.pending_segments() if progress else 0
        done = 0
        while not self.convert_error:
            ev = self.spool / f"{self.next_seg:06d}.ev"
            if not ev.exists():
                return
            if progress:
                progress(f"segment {done + 1:,} of {max(left, done + 1):,}, "
                         f"{self.writer.events:,} events written")
            done += 1
            try:
                recs, payloads = read_segment(ev)
                self.writer.write_events(convert(recs, payloads, self.model))
            except OSError as e:
                self._write_failed(e)
                return
            ev.unlink()
            ev.with_suffix(".str").unlink(missing_ok=True)
            self.next_seg += 1

    def _snapshot(self) -> None:
        if self.convert_error:
            return
        try:
            if self.profile and self._profile_changed():
                self.meta.update(write_profile(self.spool, self.out, self.model, self.owner))
            self.writer.write_tables(self.model)
            self.writer.write_meta(drops=self.progress.drops,
                                   drop_intervals=self.drop_intervals)
        except OSError as e:
            self._write_failed(e)

    def _profile_changed(self) -> bool:
        """Whether the recorder wrote to its profile files since the last look
        (the whole-run table is snapshotted every 5 s, the tables every 2 s)."""
        stamp = tuple((st.st_size, st.st_mtime_ns) for st in (
            p.stat() for p in (self.spool / "profile-calls.bin",
                               self.spool / "profile-rates.bin") if p.exists()))
        changed = stamp != self._profile_stamp
        self._profile_stamp = stamp
        return changed

    def _write_failed(self, e: OSError) -> None:
        """The trace cannot be written (disk full...): stop tracing, the job runs on."""
        full = e.errno == errno.ENOSPC or "No space left" in str(e)
        self.convert_error = "the disk is full" if full else (e.strerror or str(e))
        self.signal_recorder(signal.SIGUSR1)

    def loop(self) -> None:
        """Runs until the recorder ends; converts segments as they close."""
        last_tables = time.monotonic()
        while self.end is None:
            got = self._read_status(timeout=0.25)
            if not got and self.proc.poll() is not None:
                # Recorder gone without an end line (killed): drain the pipe.
                while self._read_status(timeout=0):
                    pass
                break
            self._convert_ready()
            self.clock.tick()
            if time.monotonic() - last_tables >= TABLES_EVERY_S:
                self._snapshot()
                self._reap_orphans()
                last_tables = time.monotonic()
        # After its end status the recorder only detaches (fentry links wait
        # for an RCU-tasks grace period each; tracing is already off). Waited
        # for: when iotrace ends, nothing of it is left in the kernel.
        self.proc.wait()

    def _reap_orphans(self) -> None:
        """As a subreaper, iotrace adopts the job's orphaned descendants (a
        daemon it double-forked): reaps those that ended, never the recorder
        or the job."""
        if not self.run_mode:
            return
        keep = {self.proc.pid, (self.ready or {}).get("pid")}
        while True:
            try:
                res = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if res is None or res.si_pid in keep:
                return
            try:
                os.waitpid(res.si_pid, 0)
            except ChildProcessError:
                return

    def recorder_died(self) -> bool:
        return self.end is None

    def wait_orphaned_job(self) -> None:
        """The recorder died without the job's status: the job is iotrace's
        child now (subreaper); waits for it to end and keeps its status."""
        job = (self.ready or {}).get("pid")
        if not self.run_mode or not job or not self.recorder_died():
            return
        while True:
            try:
                _, st = os.waitpid(job, 0)
            except InterruptedError:
                continue
            except ChildProcessError:
                return        # reaped by the recorder before it died: unknown
            self.orphan_status = st
            return

    def stop_error(self) -> Optional[str]:
        """Why tracing stopped early, in words, or None."""
        if self.convert_error:
            return self.convert_error
        for e in self.errors:
            if e.get("error") == "disk-full":
                return "the disk is full"
            if e.get("error") == "write-error":
                return os.strerror(e.get("errno", 0))
        return None

    def _reserve_space(self) -> None:
        """Space held on the trace's disk for the final tables and meta.json: a
        disk that fills up while tracing (the job's own files, or the trace)
        still takes an honest meta.json. Freed by finish(); skipped on a disk
        that has not even that much."""
        try:
            fd = os.open(self.spool / RESERVE_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        except OSError:
            os.unlink(self.spool / RESERVE_NAME)
        finally:
            os.close(fd)

    def finish(self, progress: Optional[Callable[[str], None]] = None) -> dict:
        """Converts what is left (progress: hears of each segment) and writes
        the final tables and meta.json."""
        try:
            (self.spool / RESERVE_NAME).unlink()
        except OSError:
            pass
        if self.pysampler:
            self.pysampler.stop()
        self._convert_ready(progress)
        if self.stop_error():
            # What is left in the spool cannot be converted: free its space so
            # that at least the tables and an honest meta.json get written.
            lost = sum(f.stat().st_size for f in self.spool.glob("*.ev*")) // 96
            shutil.rmtree(self.spool, ignore_errors=True)
            self.model.counters["events_lost_unwritten"] = lost
        leftovers = sorted(self.spool.glob("*.part")) if self.spool.exists() else []
        end = self.end or {}
        counters = dict(self.model.counters)
        # files seen only through an fd whose open we never saw (no path known)
        counters["files_without_path"] = sum(1 for f in self.model.files.values()
                                             if f.path is None)
        # a libibverbs the job loaded that is not the one the uprobes are on:
        # its verbs calls were not seen (iotrace run --verbs-lib PATH). With no
        # RDMA device there was nothing for them to do.
        probed = self.meta["probes"].get("verbs_library")
        no_device = any(sk["why"].startswith("no RDMA device")
                        for sk in self.meta["probes"].get("skipped", []))
        other = [] if no_device else sorted(
            {f.path for f in self.model.files.values()
             if f.path and "/libibverbs.so" in f.path
             and (not probed or os.path.realpath(f.path) != os.path.realpath(probed))})
        counters["verbs_libraries_not_probed"] = len(other)
        if other:
            self.meta["probes"]["verbs_libraries_not_probed"] = other
        counters.update({k: end.get(k, 0) for k in
                         ("path_truncated", "no_storage", "traced_full", "kernel_capped",
                          "cache_other_bytes", "block_lost", "async_lost", "unknown_records",
                          "probe_misses", "block_no_completion", "calls_entry_unseen",
                          "calls_return_unseen", "own_lock_waits", "faults_unresolved",
                          "releases_untimed")})
        # system calls entered but not returned when the trace stopped: their
        # records carry eflags UNFINISHED (-1: the recorder could not list them)
        # and those an attach's processes were in (asleep or running) when it began
        # (eflags BEGAN_BEFORE)
        for key, when in (("calls_unfinished", "stopped"), ("calls_began_before", "started")):
            n = end.get(key, 0)
            counters[key] = max(n, 0)
            if n < 0:
                self.meta["probes"].setdefault("skipped", []).append(
                    {"probe": f"calls in progress when tracing {when} (task iterator)",
                     "why": "the kernel refused the iterator: such calls are not in the trace"})
        # runs of a BPF program the kernel skipped (it was already running on
        # that CPU): their records are lost, by program
        if end.get("probe_misses_by_prog"):
            self.meta["probes"]["misses_by_program"] = end["probe_misses_by_prog"]
        if self.profile:   # calls without their key, or missing from the rates
            counters["profile_overflow"] = end.get("profile_overflow", 0)
            counters["profile_rate_lost"] = end.get("profile_rate_lost", 0)
        # system-call records the full ring buffer lost, by op
        drops_by_op = {OP_NAMES[int(k)] if int(k) < len(OP_NAMES) else k: v
                       for k, v in (end.get("drops_by_op") or {}).items()}
        state = "complete"
        if self.stop_error() or not end or end.get("reason") == "error":
            state = "incomplete"
        meta_updates = dict(
            block_devices=device_names(),
            state=state,
            stop_reason=end.get("reason", "recorder-died"),
            drops=end.get("drops", self.progress.drops),
            drops_by_op=drops_by_op,
            drop_intervals=self.drop_intervals,
            recorder_events=end.get("events"),
            recorder_cpu_s=end.get("cpu_s"),
            bytes_read=end.get("bytes_read"),
            bytes_written=end.get("bytes_written"),
            duration_ns=end.get("elapsed_ns"),
            end_monotonic_ns=end.get("end_monotonic_ns"),
            counters=counters,
            clock=self._end_clock(),
            files=len(self.model.files),
            processes=len(self.model.all_procs()),
            threads=len(self.model.all_threads()),
        )
        if self.stop_error():
            meta_updates["error"] = f"stopped tracing early: {self.stop_error()}"
        job = end.get("job_status", -1)
        if self.run_mode and job is not None and job >= 0:
            meta_updates["exit_status"] = {"code": (job >> 8) & 0xFF if not job & 0x7F else None,
                                           "signal": job & 0x7F or None}
        try:
            if self.profile and not self.stop_error():
                meta_updates.update(write_profile(self.spool, self.out, self.model, self.owner))
            self.writer.write_tables(self.model)
            if self.pysampler:
                meta_updates["py_stacks"] = self.pysampler.write_tables(self.out)
                for name in ("pystacks", "pyframes"):
                    if (self.out / f"{name}.parquet").exists():
                        self.writer._own(self.out / f"{name}.parquet")
            try:
                meta_updates.update(self.writer.write_requests())
            except duckdb.Error as e:   # the trace stands without them: say so
                meta_updates["requests_error"] = f"requests table not built: {e}"
                counters["requests_table_failed"] = 1
            self.writer.write_meta(**meta_updates)
        except OSError as e:
            self.final_write_error = e.strerror or str(e)
        if not self.stop_error() and not leftovers:
            shutil.rmtree(self.spool, ignore_errors=True)
        return self.writer.meta

    def _end_clock(self) -> dict:
        self.clock.tick(force=True)
        return self.clock.meta()

    def job_exit_code(self) -> int:
        if self.exec_errno:
            return 127 if self.exec_errno == errno.ENOENT else 126
        job = (self.end or {}).get("job_status", -1)
        if (job is None or job < 0) and self.orphan_status is not None:
            job = self.orphan_status
        if job is None or job < 0:
            return EXIT_TRACE
        if job & 0x7F:
            return 128 + (job & 0x7F)
        return (job >> 8) & 0xFF

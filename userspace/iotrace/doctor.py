"""`iotrace doctor`: can this machine trace, and what will iotrace see?"""
from __future__ import annotations

import json
import os
import platform
import subprocess

from rich.console import Console

from .errors import EXIT_ENV
from .privileges import CAP_SYS_NICE, can_trace, effective_caps
from .session import recorder_path

MIN_KERNEL = (5, 11)  # ring buffer (5.8), tp_btf + task storage in tracing programs (5.11)


def skipped_by_reason(skipped: list[dict]) -> dict[str, list[str]]:
    """{why: [probe, ...]}: probes skipped for the same reason, together."""
    out: dict[str, list[str]] = {}
    for sk in skipped:
        out.setdefault(sk["why"], []).append(sk["probe"])
    return out


def kernel_version() -> tuple[int, int]:
    rel = platform.release()
    parts = rel.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def run_doctor(console: Console) -> int:
    ok = True

    def line(good: bool, what: str, detail: str, required: bool = True) -> None:
        nonlocal ok
        mark = "[green]ok[/green]  " if good else ("[red]FAIL[/red]" if required else "[yellow]skip[/yellow]")
        console.print(f"  {mark} {what}: {detail}")
        if required and not good:
            ok = False

    console.print("[bold]iotrace doctor[/bold]")
    priv = can_trace()
    line(priv, "privileges", "root or CAP_BPF+CAP_PERFMON" if priv else
         "not root: run `sudo iotrace doctor` (tracing needs root or CAP_BPF+CAP_PERFMON)")
    nice = bool(effective_caps() >> CAP_SYS_NICE & 1)
    line(nice, "recorder priority", "nice -10 (CAP_SYS_NICE): a job that keeps every CPU busy "
         "does not starve the drain" if nice else "no CAP_SYS_NICE: the recorder drains at the "
         "job's priority and may drop records when the job keeps every CPU busy",
         required=False)
    kv = kernel_version()
    line(kv >= MIN_KERNEL, "kernel", f"{platform.release()} "
         + ("" if kv >= MIN_KERNEL else f"(needs >= {MIN_KERNEL[0]}.{MIN_KERNEL[1]})"))
    btf = os.path.exists("/sys/kernel/btf/vmlinux")
    line(btf, "BTF", "/sys/kernel/btf/vmlinux" if btf else
         "missing: the kernel needs CONFIG_DEBUG_INFO_BTF=y")
    tracefs = os.path.isdir("/sys/kernel/tracing/events")
    line(tracefs, "tracefs", "/sys/kernel/tracing" if tracefs else
         "not mounted (optional for iotrace): mount -t tracefs nodev /sys/kernel/tracing",
         required=False)
    from .pystacks import sampler_path
    sampler = sampler_path()
    line(bool(sampler), "Python stacks", f"{sampler} (py-spy as a library; the verdict counts "
         "the loop's time inside its loader's next())" if sampler else
         "iotrace-pysampler not built (make builds it with cargo): the verdict is the "
         "kernel's alone, and the loop's own CPU inside its loader counts as compute",
         required=False)
    try:
        rec = recorder_path()
        line(True, "recorder", rec)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        line(False, "recorder", str(e))
        return EXIT_ENV
    if not priv or not btf:
        console.print("probes: not checked (needs the above)")
        return EXIT_ENV
    proc = subprocess.run([rec, "--check"], capture_output=True, text=True)
    if proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or ["unknown error"])[0]
        line(False, "probes", msg)
        return EXIT_ENV
    res = json.loads(proc.stdout)
    hooks = res.get("syscall_hooks")
    if hooks == "fentry":
        line(True, "system calls", "fentry/fexit on each traced call's kernel function (other "
             "system calls and processes pay nothing)")
    elif hooks:
        line(True, "system calls", f"sys_enter/sys_exit tracepoints ({res['syscall_hooks_why']}"
             "): every system call of every process takes the kernel's slower path while "
             "iotrace traces (about 1.1-1.2x on an untraced process's cached 4 KiB reads); "
             "a kernel that allows fentry programs avoids it")
    reads = res.get("kernel_reads")
    if reads == "direct":
        line(True, "kernel reads", "direct loads (bpf_rdonly_cast): a call's file identity "
             "takes no helper call")
    elif reads:
        line(True, "kernel reads", f"bpf_probe_read_kernel helper calls ({res['kernel_reads_why']}"
             "): about 90 ns more per file system call")
    rings, ring_bytes = res.get("rings"), res.get("ring_bytes")
    if rings:
        cpus = os.cpu_count() or 1
        line(True, "record rings", f"{rings} x {ring_bytes / (1 << 20):g} MiB "
             + ("(one per CPU)" if rings >= cpus else f"(shared by {cpus} CPUs)")
             + " at the default --ringbuf-mb")
    console.print("probes:")
    for name in res["attached"]:
        line(True, name, "attaches")
    for why, probes in skipped_by_reason(res["skipped"]).items():
        names = ", ".join(probes) if len(probes) <= 3 else \
            f"{len(probes)} probes ({probes[0]} ... {probes[-1]})"
        line(False, names, why, required=False)
    console.print("tracing works" if ok else "[red]tracing does not work here[/red]")
    return 0 if ok else EXIT_ENV

//! iotrace-pysampler: samples the Python call stacks of a traced job, every
//! thread of it and of all its descendant processes, on CLOCK_MONOTONIC (the
//! trace's clock), and writes them to a line file the iotrace package turns
//! into the trace's `pystacks` tables.
//!
//! Why py-spy as a library and not its command line: `py-spy record` gives
//! no time of each sample on a clock the trace can use (its chrometrace
//! output counts from its own start), and one `py-spy record` follows one
//! process tree at a time with no way to hand it new roots. The library reads
//! a CPython's frames from outside (process_vm_readv), for CPython 2.7 and
//! 3.3-3.14, with no change to the job; here it is asked for every process's
//! stacks at each tick, and each answer is stamped with the time it was taken.
//!
//! Usage: iotrace-pysampler --out FILE [--rate HZ] [--native] PID...
//! The PIDs are roots: their descendants are found by scanning /proc every
//! 200 ms. Ends on SIGTERM or SIGINT, or when every root has exited.
//!
//! Output, one record a line, tab-separated:
//!   P pid version                     a process sampled from now on
//!   N pid reason                      a process that could not be sampled
//!   F id function file short_file line  a frame (first use)
//!   T pid tid name                    a thread's Python name (first use)
//!   S ts_ns pid tid flags frame_ids   a sample; flags: 1 on CPU, 2 holds the GIL;
//!                                     frame ids leaf first, comma-separated
//!   X pid                             a process that exited
//!   Z samples errors late_ticks ticks the end (counts of the whole run)
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use py_spy::config::{LineNo, LockingStrategy};
use py_spy::timer::Timer;
use py_spy::{Config, PythonSpy};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn mono_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
}

struct Args {
    roots: Vec<i32>,
    rate: f64,
    out: String,
    native: bool,
}

const USAGE: &str = "usage: iotrace-pysampler --out FILE [--rate HZ] [--native] PID...";

fn parse_args() -> Result<Args, String> {
    let mut a = Args { roots: vec![], rate: 100.0, out: String::new(), native: false };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--out" => a.out = it.next().ok_or("--out needs a file")?,
            "--rate" => {
                a.rate = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|r: &f64| *r > 0.0 && *r <= 10000.0)
                    .ok_or("--rate needs a number of samples a second, 1 to 10000")?
            }
            "--native" => a.native = true,
            "-h" | "--help" => return Err(USAGE.into()),
            p => a.roots.push(p.parse().map_err(|_| format!("not a pid: {p}\n{USAGE}"))?),
        }
    }
    if a.out.is_empty() || a.roots.is_empty() {
        return Err(USAGE.into());
    }
    Ok(a)
}

/// pid -> ppid of every process now, from /proc/PID/stat.
fn parents() -> HashMap<i32, i32> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // the command name may hold spaces and parentheses: fields follow the last ')'
        if let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) {
            if let Some(pp) = rest.split(' ').nth(1).and_then(|v| v.parse().ok()) {
                out.insert(pid, pp);
            }
        }
    }
    out
}

fn descendants(roots: &[i32], parent: &HashMap<i32, i32>) -> HashSet<i32> {
    let mut out: HashSet<i32> = roots.iter().copied().filter(|p| parent.contains_key(p)).collect();
    loop {
        let more: Vec<i32> = parent
            .iter()
            .filter(|(p, pp)| out.contains(pp) && !out.contains(p))
            .map(|(p, _)| *p)
            .collect();
        if more.is_empty() {
            return out;
        }
        out.extend(more);
    }
}

/// Whether a process has a Python interpreter mapped (its binary or libpython):
/// a cheap test before py-spy parses its binaries.
fn maps_python(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| m.to_ascii_lowercase().contains("python"))
        .unwrap_or(false)
}

fn clean(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

/// Tries to sample a process for this long after its interpreter shows in its
/// maps (a process that has just exec'd Python has not set it up yet).
const TRY_FOR: Duration = Duration::from_secs(3);
const SCAN_EVERY: Duration = Duration::from_millis(200);
const FLUSH_EVERY: Duration = Duration::from_millis(500);

enum Target {
    Waiting(Option<Instant>), // since when its maps show Python (None: not yet)
    Sampled(Box<PythonSpy>),
    Refused,
}

struct Out {
    w: BufWriter<File>,
    frames: HashMap<(String, String, i32), u32>,
    names: HashSet<(i32, i64)>,
}

impl Out {
    fn frame(&mut self, f: &py_spy::Frame) -> std::io::Result<u32> {
        let key = (f.name.clone(), f.filename.clone(), f.line);
        if let Some(id) = self.frames.get(&key) {
            return Ok(*id);
        }
        let id = self.frames.len() as u32;
        let short = f.short_filename.as_deref().unwrap_or(&f.filename);
        writeln!(self.w, "F\t{id}\t{}\t{}\t{}\t{}", clean(&f.name), clean(&f.filename),
                 clean(short), f.line)?;
        self.frames.insert(key, id);
        Ok(id)
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("iotrace-pysampler: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    if args.native && !cfg!(feature = "unwind") {
        anyhow::bail!("--native needs a build with the 'unwind' feature (libunwind)");
    }
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as usize);
        libc::signal(libc::SIGINT, on_signal as *const () as usize);
    }
    let mut config = Config::default();
    // Never stop the job to read it (py-spy's default pauses each process):
    // a stack read while the thread runs on may be torn, and is then
    // refused by py-spy and counted as an error.
    config.blocking = if args.native { LockingStrategy::Lock } else { LockingStrategy::NonBlocking };
    config.native = args.native;
    config.include_idle = true;
    config.lineno = LineNo::First; // a function's first line names it; the call line would split it
    let mut out = Out {
        w: BufWriter::with_capacity(1 << 20, File::create(&args.out)?),
        frames: HashMap::new(),
        names: HashSet::new(),
    };
    let mut targets: HashMap<i32, Target> = HashMap::new();
    let (mut samples, mut errors, mut late, mut ticks) = (0u64, 0u64, 0u64, 0u64);
    let mut last_scan: Option<Instant> = None;
    let mut last_flush = Instant::now();
    for sleep in Timer::new(args.rate) {
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        ticks += 1;
        if sleep.is_err() {
            late += 1;
        }
        if last_scan.map_or(true, |t| t.elapsed() >= SCAN_EVERY) {
            last_scan = Some(Instant::now());
            let parent = parents();
            let live = descendants(&args.roots, &parent);
            if live.is_empty() && !args.roots.iter().any(|r| parent.contains_key(r)) {
                break; // the job is over
            }
            for pid in targets.keys().copied().filter(|p| !live.contains(p)).collect::<Vec<_>>() {
                if matches!(targets.remove(&pid), Some(Target::Sampled(_))) {
                    writeln!(out.w, "X\t{pid}")?;
                }
            }
            for pid in live {
                let t = targets.entry(pid).or_insert(Target::Waiting(None));
                if let Target::Waiting(since) = t {
                    if !maps_python(pid) {
                        continue;
                    }
                    let since = *since.get_or_insert_with(Instant::now);
                    match PythonSpy::new(pid, &config) {
                        Ok(spy) => {
                            writeln!(out.w, "P\t{pid}\t{}", spy.version)?;
                            *t = Target::Sampled(Box::new(spy));
                        }
                        Err(e) if since.elapsed() >= TRY_FOR => {
                            writeln!(out.w, "N\t{pid}\t{}", clean(&format!("{e:#}")))?;
                            *t = Target::Refused;
                        }
                        Err(_) => *t = Target::Waiting(Some(since)),
                    }
                }
            }
        }
        for (pid, t) in targets.iter_mut() {
            let Target::Sampled(spy) = t else { continue };
            let ts = mono_ns();
            let traces = match spy.get_stack_traces() {
                Ok(v) => v,
                Err(_) => {
                    errors += 1; // torn read, or the process is exiting
                    continue;
                }
            };
            for tr in traces {
                // before CPython 3.11 the interpreter does not hold the OS thread
                // id; its main thread's is the pid
                let main = tr.thread_name.as_deref() == Some("MainThread");
                let tid = tr.os_thread_id.map_or(if main { *pid as i64 } else { -1 }, |t| t as i64);
                if let Some(name) = &tr.thread_name {
                    if out.names.insert((*pid, tr.thread_id as i64)) {
                        writeln!(out.w, "T\t{pid}\t{tid}\t{}", clean(name))?;
                    }
                }
                let mut ids = Vec::with_capacity(tr.frames.len());
                for f in &tr.frames {
                    ids.push(out.frame(f)?.to_string());
                }
                let flags = (tr.active as u8) | ((tr.owns_gil as u8) << 1);
                writeln!(out.w, "S\t{ts}\t{pid}\t{tid}\t{flags}\t{}", ids.join(","))?;
                samples += 1;
            }
        }
        if last_flush.elapsed() >= FLUSH_EVERY {
            out.w.flush()?; // a crash loses at most the last half second
            last_flush = Instant::now();
        }
    }
    writeln!(out.w, "Z\t{samples}\t{errors}\t{late}\t{ticks}")?;
    out.w.flush()?;
    Ok(())
}

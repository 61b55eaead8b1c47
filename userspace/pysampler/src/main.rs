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
//! 200 ms. Each Python process gets a sampling thread of its own, so that
//! setting up a new one (py-spy parses its binaries: tens of milliseconds)
//! never holds up the others' samples, and each samples at random
//! (exponential) intervals, as py-spy does, so that no periodic work of the
//! job aliases with it. Ends on SIGTERM or SIGINT, or when every root has
//! exited.
//!
//! Output, one record a line, tab-separated:
//!   P pid version                     a process sampled from now on
//!   N pid reason                      a process that could not be sampled
//!   F id function file short_file line  a frame (first use)
//!   T pid tid name                    a thread's Python name (first use)
//!   S ts_ns pid tid flags frame_ids dur_ns
//!                                     a sample: ts_ns is the middle of the read of
//!                                     the process's stacks, dur_ns its length;
//!                                     flags: 1 on CPU, 2 holds the GIL; frame ids
//!                                     leaf first, comma-separated
//!   E ts_ns pid                       a read of the process's stacks that failed
//!                                     (a stack that changed while read): a moment
//!                                     whose state is unknown
//!   X pid                             a process that exited
//!   Z samples errors late_ticks ticks retries torn
//!                                     the end (counts of the whole run; errors:
//!                                     reads that failed RETRIES + 1 times at a tick,
//!                                     retries: reads made again after one failed,
//!                                     torn: reads made again after one whose main
//!                                     thread's stack stopped short of its root)
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
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

/// Frame ids shared by the sampling threads (the writer names each once).
struct Frames {
    ids: std::sync::Mutex<HashMap<(String, String, i32), u32>>,
}

impl Frames {
    /// The frame's id, and its 'F' line when it is new.
    fn id(&self, f: &py_spy::Frame, lines: &mut String) -> u32 {
        let mut ids = self.ids.lock().unwrap();
        let key = (f.name.clone(), f.filename.clone(), f.line);
        if let Some(id) = ids.get(&key) {
            return *id;
        }
        let id = ids.len() as u32;
        let short = f.short_filename.as_deref().unwrap_or(&f.filename);
        let _ = writeln!(lines, "F\t{id}\t{}\t{}\t{}\t{}", clean(&f.name), clean(&f.filename),
                         clean(short), f.line);
        ids.insert(key, id);
        id
    }
}

/// Reads of a process's stacks again after one failed, at one tick.
const RETRIES: u32 = 3;

/// Whether a read's main thread stack stops short of its root (`<module>`,
/// or runpy's functions under `python -m`): its frame chain changed while it
/// was walked (the process is not paused), and the walk ended early, with
/// the outer frames (the loader's next() among them) missing. Seen on 1-2%
/// of a tf.data loop's samples, nearly all while it ran Python code inside
/// next(): kept, they put a third of its samples there outside it.
fn torn(traces: &[py_spy::StackTrace], pid: i32) -> bool {
    traces.iter().any(|t| {
        let main = match t.os_thread_id {
            Some(tid) => tid as i64 == pid as i64,
            None => t.thread_name.as_deref() == Some("MainThread"),
        };
        main && t.frames.last().map_or(false, |f| {
            f.name != "<module>" && !f.filename.ends_with("runpy.py")
        })
    })
}

/// A process whose main thread's stacks stop short of `<module>` in at least
/// this many reads, and in most of its reads, has another root (an embedded
/// interpreter): its reads are no longer checked for it.
const TORN_GIVE_UP: u64 = 20;

/// One read of a process's stacks: (the result, the middle of the read, its length) in ns.
fn read_stacks(spy: &mut PythonSpy) -> (Result<Vec<py_spy::StackTrace>, anyhow::Error>, i64, i64) {
    let t0 = mono_ns();
    let got = spy.get_stack_traces();
    let t1 = mono_ns();
    (got, (t0 + t1) / 2, t1 - t0)
}

struct Counts {
    samples: AtomicU64,
    errors: AtomicU64,
    retries: AtomicU64,
    torn: AtomicU64,
    late: AtomicU64,
    ticks: AtomicU64,
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

/// One process: set up its reader (retrying while its interpreter starts),
/// then sample it until it exits or the sampler stops. Lines go to the writer.
fn sample_process(pid: i32, config: Config, rate: f64, frames: Arc<Frames>, counts: Arc<Counts>,
                  tx: mpsc::Sender<String>) {
    let since = Instant::now();
    let mut spy = loop {
        if STOP.load(Ordering::SeqCst) {
            return;
        }
        match PythonSpy::new(pid, &config) {
            Ok(spy) => break spy,
            Err(e) if since.elapsed() >= TRY_FOR
                || !std::path::Path::new(&format!("/proc/{pid}")).exists() => {
                let _ = tx.send(format!("N\t{pid}\t{}\n", clean(&format!("{e:#}"))));
                return;
            }
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    };
    let _ = tx.send(format!("P\t{pid}\t{}\n", spy.version));
    let mut names: HashSet<u64> = HashSet::new();
    let mut lines = String::with_capacity(1 << 16);
    let mut last_send = Instant::now();
    let (mut check_torn, mut kept_torn, mut reads) = (true, 0u64, 0u64);
    for sleep in Timer::new(rate) {
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        counts.ticks.fetch_add(1, Ordering::Relaxed);
        if sleep.is_err() {
            counts.late.fetch_add(1, Ordering::Relaxed);
        }
        // A read fails when a stack changes while it is read: mostly a thread
        // running Python code. Dropping those moments undercounts that state
        // (seen: a loop decoding inside its loader's next() sampled 25 reads
        // short of its own clock in 580); read again at once (the state
        // lasts far longer than a read, a tenth of a millisecond).
        // A torn stack (torn()) is read again the same way.
        let (mut got, mut ts, mut dur) = read_stacks(&mut spy);
        reads += 1;
        for _ in 0..RETRIES {
            match &got {
                Ok(traces) if !(check_torn && torn(traces, pid)) => break,
                Ok(_) => counts.torn.fetch_add(1, Ordering::Relaxed),
                Err(_) => counts.retries.fetch_add(1, Ordering::Relaxed),
            };
            (got, ts, dur) = read_stacks(&mut spy);
        }
        if check_torn && matches!(&got, Ok(traces) if torn(traces, pid)) {
            kept_torn += 1;
            check_torn = !(kept_torn >= TORN_GIVE_UP && 2 * kept_torn > reads);
        }
        match got {
            Err(_) => {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    break;
                }
                // a stack that changed while it was read: that moment is unknown
                counts.errors.fetch_add(1, Ordering::Relaxed);
                let _ = writeln!(lines, "E\t{ts}\t{pid}");
            }
            Ok(traces) => {
                for tr in traces {
                    // before CPython 3.11 the interpreter does not hold the OS thread
                    // id; its main thread's is the pid
                    let main = tr.thread_name.as_deref() == Some("MainThread");
                    let tid = tr.os_thread_id.map_or(if main { pid as i64 } else { -1 },
                                                     |t| t as i64);
                    if let Some(name) = &tr.thread_name {
                        if names.insert(tr.thread_id) {
                            let _ = writeln!(lines, "T\t{pid}\t{tid}\t{}", clean(name));
                        }
                    }
                    let mut ids = String::new();
                    for (i, f) in tr.frames.iter().enumerate() {
                        if i > 0 {
                            ids.push(',');
                        }
                        let _ = write!(ids, "{}", frames.id(f, &mut lines));
                    }
                    let flags = (tr.active as u8) | ((tr.owns_gil as u8) << 1);
                    let _ = writeln!(lines, "S\t{ts}\t{pid}\t{tid}\t{flags}\t{ids}\t{dur}");
                    counts.samples.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if last_send.elapsed() >= Duration::from_millis(100) {
            if tx.send(std::mem::take(&mut lines)).is_err() {
                return;
            }
            last_send = Instant::now();
        }
    }
    lines.push_str(&format!("X\t{pid}\n"));
    let _ = tx.send(lines);
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
    // refused by py-spy and written as a moment of unknown state.
    config.blocking = if args.native { LockingStrategy::Lock } else { LockingStrategy::NonBlocking };
    config.native = args.native;
    config.include_idle = true;
    config.lineno = LineNo::First; // a function's first line names it; the call line would split it
    let mut w = BufWriter::with_capacity(1 << 20, File::create(&args.out)?);
    let frames = Arc::new(Frames { ids: std::sync::Mutex::new(HashMap::new()) });
    let counts = Arc::new(Counts { samples: AtomicU64::new(0), errors: AtomicU64::new(0),
                                   retries: AtomicU64::new(0), torn: AtomicU64::new(0),
                                   late: AtomicU64::new(0), ticks: AtomicU64::new(0) });
    let (tx, rx) = mpsc::channel::<String>();
    let mut started: HashSet<i32> = HashSet::new();
    let mut workers = Vec::new();
    let mut last_flush = Instant::now();
    loop {
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        let parent = parents();
        let live = descendants(&args.roots, &parent);
        if live.is_empty() && !args.roots.iter().any(|r| parent.contains_key(r)) {
            break; // the job is over
        }
        started.retain(|p| live.contains(p)); // a pid reused later is a new process
        for pid in live {
            if started.contains(&pid) || !maps_python(pid) {
                continue;
            }
            started.insert(pid);
            let (c, f, n, t) = (config.clone(), frames.clone(), counts.clone(), tx.clone());
            let rate = args.rate;
            workers.push(thread::spawn(move || sample_process(pid, c, rate, f, n, t)));
        }
        let until = Instant::now() + SCAN_EVERY;
        while let Ok(lines) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            w.write_all(lines.as_bytes())?;
            if Instant::now() >= until {
                break;
            }
        }
        if last_flush.elapsed() >= FLUSH_EVERY {
            w.flush()?; // a crash loses at most the last half second
            last_flush = Instant::now();
        }
    }
    STOP.store(true, Ordering::SeqCst);
    drop(tx);
    for h in workers {
        let _ = h.join();
    }
    while let Ok(lines) = rx.try_recv() {
        w.write_all(lines.as_bytes())?;
    }
    writeln!(w, "Z\t{}\t{}\t{}\t{}\t{}\t{}", counts.samples.load(Ordering::SeqCst),
             counts.errors.load(Ordering::SeqCst), counts.late.load(Ordering::SeqCst),
             counts.ticks.load(Ordering::SeqCst), counts.retries.load(Ordering::SeqCst),
             counts.torn.load(Ordering::SeqCst))?;
    w.flush()?;
    Ok(())
}

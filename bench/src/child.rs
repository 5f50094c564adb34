//! A real `steward run` process for the process-level scenarios: its temporary directory,
//! the child itself (killed on drop), plain HTTP to its API, and its figures from `/proc`.

use std::io::{Read, Write};
use std::marker::PhantomData;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// Clock ticks per second of `/proc/PID/stat` times. `libc` is not a dependency of the bench,
/// so `sysconf(_SC_CLK_TCK)` is not called: this assumes the Linux default of 100
/// (`getconf CLK_TCK` prints 100 on the machines the bench runs on).
const CLK_TCK: f64 = 100.0;

/// The plugins built for the bench, once per process, by package name.
pub fn built_plugins() -> Result<&'static std::collections::BTreeMap<String, PathBuf>> {
    static BUILT: std::sync::OnceLock<std::result::Result<std::collections::BTreeMap<String, PathBuf>, String>> =
        std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let all: Vec<&str> = steward_plugin_build::BUNDLED.iter().copied().chain(["noop", "misbehave"]).collect();
            steward_plugin_build::build(&all).map_err(|e| e.0)
        })
        .as_ref()
        .map_err(|e| anyhow!("{e}"))
}

/// A temporary host directory: `plugins/`, `resources/`, `cache/`, `state/`, the config and
/// one log file per start. Removed on drop.
pub struct HostDir {
    dir: tempfile::TempDir,
    extra_config: String,
    starts: std::cell::Cell<usize>,
}

impl HostDir {
    /// A directory with the built `plugins` and `extra_config` appended to the config.
    pub fn new(plugins: &[&str], extra_config: &str) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("steward-bench-").tempdir()?;
        std::fs::create_dir_all(dir.path().join("resources"))?;
        std::fs::create_dir_all(dir.path().join("plugins"))?;
        let built = built_plugins()?;
        for p in plugins {
            let from = built.get(*p).with_context(|| format!("plugin {p} was not built"))?;
            std::fs::copy(from, dir.path().join("plugins").join(format!("{p}.wasm")))?;
        }
        Ok(Self { dir, extra_config: extra_config.to_string(), starts: Default::default() })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The resources directory.
    pub fn resources(&self) -> PathBuf {
        self.path().join("resources")
    }

    /// Empties the compile cache.
    pub fn clear_cache(&self) -> Result<()> {
        match std::fs::remove_dir_all(self.path().join("cache")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Writes the config with a free loopback port and starts the host on it.
    pub fn start(&self) -> Result<Host<'_>> {
        let addr = free_port()?;
        let config = self.path().join("steward.yaml");
        let text = format!(
            "resources: resources\nplugin_dir: plugins\nstate: state/state.redb\ncache_dir: cache\napi: {{ listen: {addr} }}\n{}",
            self.extra_config
        );
        std::fs::write(&config, text)?;
        self.starts.set(self.starts.get() + 1);
        let log = self.path().join(format!("host-{}.log", self.starts.get()));
        Host::spawn(&config, addr, log)
    }

    /// Starts the host, waits for `/readyz` and stops it: fills the compile cache.
    pub fn warm_cache(&self) -> Result<()> {
        let mut host = self.start()?;
        host.wait_ready(Duration::from_secs(120))?;
        host.stop()
    }
}

fn free_port() -> Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

/// A running `steward run` (this binary as `__host run`). Killed on drop; a host dropped
/// without [`Host::stop`] means a failed scenario, so the drop prints its log's tail.
pub struct Host<'a> {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    /// When the process was spawned.
    pub started: Instant,
    stopped: bool,
    _dir: PhantomData<&'a HostDir>,
}

impl Host<'_> {
    fn spawn(config: &Path, addr: SocketAddr, log: PathBuf) -> Result<Self> {
        let stderr = std::fs::File::create(&log)?;
        let started = Instant::now();
        // `STEWARD_BENCH_WRAP="heaptrack -o /tmp/h"` runs the host under a profiler (the
        // process figures are then the wrapper's, so use it to profile, not to measure).
        // `valgrind --tool=callgrind` counts instructions, the one figure of this noisy machine
        // that does not move between runs (it has no hardware counters for `perf stat`); it
        // hands the host its SIGTERM, so `stop` works, and `callgrind_control -z PID` at
        // `/readyz` leaves the reconciling window.
        let wrap = std::env::var("STEWARD_BENCH_WRAP").unwrap_or_default();
        let mut words = wrap.split_whitespace();
        let mut cmd = match words.next() {
            Some(program) => {
                let mut c = Command::new(program);
                c.args(words).arg(std::env::current_exe()?);
                c
            }
            None => Command::new(std::env::current_exe()?),
        };
        let child = cmd
            .args(["__host", "run", "--config"])
            .arg(config)
            .env("STEWARD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .context("cannot start the host process")?;
        Ok(Self { child, addr, log, started, stopped: false, _dir: PhantomData })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails if the process has exited.
    pub fn alive(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!("the host exited early ({status})"),
            None => Ok(()),
        }
    }

    /// Polls `/readyz` every 2 ms; returns the time from spawn to the first 200.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        loop {
            if matches!(http_get(self.addr, "/readyz"), Ok((200, _))) {
                return Ok(self.started.elapsed());
            }
            self.alive()?;
            if self.started.elapsed() > timeout {
                bail!("the host was not ready {timeout:?} after its start");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// GETs `path`; fails unless it answers 200.
    pub fn get(&self, path: &str) -> Result<Vec<u8>> {
        let (status, body) = http_get(self.addr, path).with_context(|| format!("GET {path}"))?;
        if status != 200 {
            bail!("GET {path}: {status}: {}", String::from_utf8_lossy(&body).chars().take(300).collect::<String>());
        }
        Ok(body)
    }

    /// GETs `path` as JSON.
    pub fn get_json(&self, path: &str) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.get(path)?).with_context(|| format!("GET {path}: not JSON"))
    }

    /// How many objects of `kind` the overview shows Synced.
    pub fn synced(&self, kind: &str) -> Result<usize> {
        let v = self.get_json("/api/v1/overview")?;
        let k = v["kinds"].as_array().and_then(|ks| ks.iter().find(|k| k["kind"] == kind));
        Ok(k.and_then(|k| k["phases"]["Synced"].as_u64()).unwrap_or(0) as usize)
    }

    /// Waits until `n` objects of `kind` are Synced; returns when that was seen.
    ///
    /// The overview walks every object, so the poll waits ten times its own duration (at
    /// least 100 ms): polling costs the host at most about a tenth of one core, a few percent
    /// at 100,000 objects. The figures that matter do not depend on it: the reconcile window
    /// comes from the records' own times, and the host is idle between its last reconcile and
    /// the poll that sees it.
    pub fn wait_synced(&mut self, kind: &str, n: usize, timeout: Duration) -> Result<Instant> {
        let start = Instant::now();
        loop {
            let t = Instant::now();
            let synced = match self.synced(kind) {
                Ok(synced) => synced,
                Err(e) => {
                    self.alive()?;
                    return Err(e);
                }
            };
            if synced >= n {
                return Ok(Instant::now());
            }
            self.alive()?;
            if start.elapsed() > timeout {
                bail!("only {synced} of {n} {kind} objects Synced after {timeout:?}");
            }
            std::thread::sleep((t.elapsed() * 10).max(Duration::from_millis(100)));
        }
    }

    /// CPU time and memory of the process so far.
    pub fn stats(&self) -> Result<ProcStats> {
        ProcStats::of(self.pid())
    }

    /// Sends SIGTERM and waits for a clean exit (SIGKILL after 15 s).
    pub fn stop(mut self) -> Result<()> {
        self.stopped = true;
        let status = self.terminate()?;
        if !status.success() {
            self.print_log_tail();
            bail!("the host exited with {status} on SIGTERM");
        }
        Ok(())
    }

    fn terminate(&mut self) -> Result<std::process::ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        // std has no SIGTERM; the `kill` command sends it.
        let _ = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.child.kill()?;
        Ok(self.child.wait()?)
    }

    fn print_log_tail(&self) {
        print_log_tail("the host log", &self.log);
    }
}

/// Prints the last 30 lines of `log` (`what` names it) to stderr: what a failed scenario shows.
pub fn print_log_tail(what: &str, log: &Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    eprintln!("--- last lines of {what} {} ---", log.display());
    for l in &lines[lines.len().saturating_sub(30)..] {
        eprintln!("{l}");
    }
    eprintln!("---");
}

impl Drop for Host<'_> {
    fn drop(&mut self) {
        if !self.stopped {
            self.print_log_tail();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A process's CPU time and memory, from `/proc/PID/stat` and `/proc/PID/status`.
#[derive(Clone, Copy, Debug)]
pub struct ProcStats {
    /// User plus system CPU time.
    pub cpu: Duration,
    /// The system part of `cpu`: time in the kernel on the process's behalf (system calls, page
    /// faults).
    pub sys: Duration,
    /// Minor page faults (`minflt`): each first touch of a page the process had not used.
    pub minor_faults: u64,
    /// Resident set size now (`VmRSS`), MiB.
    pub rss_mib: f64,
    /// Peak resident set size (`VmHWM`), MiB.
    pub peak_rss_mib: f64,
    /// The anonymous part of the resident set now (`RssAnon`: heap, stacks, instance
    /// memories), MiB; the rest is mostly the executable's own pages, shared and clean.
    pub rss_anon_mib: f64,
}

impl ProcStats {
    /// The figures of process `pid`.
    pub fn of(pid: u32) -> Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // Fields after the command's closing parenthesis start at field 3 (state); utime and stime are 14 and 15.
        let rest = stat.rsplit_once(')').context("malformed /proc/PID/stat")?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).context("malformed /proc/PID/stat");
        let cpu = Duration::from_secs_f64((ticks(11)? + ticks(12)?) as f64 / CLK_TCK);
        let sys = Duration::from_secs_f64(ticks(12)? as f64 / CLK_TCK);
        let minor_faults = ticks(7)?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
                .with_context(|| format!("no {key} in /proc/{pid}/status"))
        };
        Ok(Self {
            cpu,
            sys,
            minor_faults,
            rss_mib: kib("VmRSS:")? / 1024.0,
            peak_rss_mib: kib("VmHWM:")? / 1024.0,
            rss_anon_mib: kib("RssAnon:")? / 1024.0,
        })
    }
}

/// The resident pages of process `pid`'s own executable (every mapping of it: text, read-only
/// data, relocated data), MiB, from `/proc/PID/smaps`: the part of the resident set the link's
/// layout decides (`host/text-order.txt`).
pub fn exe_resident_mib(pid: u32) -> Result<f64> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    let exe = exe.to_string_lossy();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))?;
    let (mut ours, mut kib) = (false, 0.0);
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            // A mapping's header starts with its address range; its path is the sixth field.
            Some(first) if first.contains('-') && !first.ends_with(':') => ours = words.nth(4) == Some(exe.as_ref()),
            Some("Rss:") if ours => {
                kib += words.next().and_then(|v| v.parse::<f64>().ok()).context("malformed Rss in smaps")?
            }
            _ => {}
        }
    }
    Ok(kib / 1024.0)
}

/// A plain HTTP/1.1 GET with `Connection: close`; returns the status and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let end = find(&raw, b"\r\n\r\n").context("no end of the HTTP headers")?;
    let head = std::str::from_utf8(&raw[..end])?;
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).context("no HTTP status")?;
    let body = &raw[end + 4..];
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    Ok((status, if chunked { dechunk(body)? } else { body.to_vec() }))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = find(b, b"\r\n").context("bad chunk header")?;
        let size_text = std::str::from_utf8(&b[..eol])?.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).context("bad chunk size")?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(b.get(..size).context("short chunk")?);
        b = b.get(size + 2..).context("short chunk")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_executables_resident_pages_are_part_of_the_resident_set() {
        let pid = std::process::id();
        let exe = exe_resident_mib(pid).unwrap();
        let rss = ProcStats::of(pid).unwrap().rss_mib;
        assert!(exe > 0.0, "this test runs code of its own executable, so some of it is resident");
        assert!(exe <= rss, "{exe} MiB of the executable within a resident set of {rss} MiB");
    }
}

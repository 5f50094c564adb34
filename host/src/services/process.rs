//! Child processes: spawned from one long-lived thread in their own process group with a parent-death signal and a clean environment; group signals; `/proc` reads.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use steward_sdk::ServiceSpec;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// What to run: the program, its arguments, its whole environment and working directory.
///
/// Its `Debug` shows the environment's names only: values may come from secrets.
#[derive(Clone)]
pub(crate) struct Launch {
    /// The program, as the spec names it (resolved through the child's `PATH`).
    pub(crate) program: String,
    args: Vec<String>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
}

impl Launch {
    /// The launch a stdio spec describes; the error says what the spec lacks.
    ///
    /// The environment is clean: `PATH` and `HOME` from the host, then the spec's `env`.
    pub(crate) fn from_spec(spec: &ServiceSpec) -> Result<Self, String> {
        let program = match spec.command.as_deref().map(str::trim) {
            Some(p) if !p.is_empty() => p.to_string(),
            _ => return Err("a stdio service needs a `command`".to_string()),
        };
        let mut env: Vec<(OsString, OsString)> = ["PATH", "HOME"]
            .into_iter()
            .filter_map(|k| std::env::var_os(k).map(|v| (OsString::from(k), v)))
            .filter(|(k, _)| !spec.env.contains_key(k.to_str().unwrap_or_default()))
            .collect();
        env.extend(spec.env.iter().map(|(k, v)| (k.into(), v.into())));
        let cwd = spec.working_dir.as_deref().filter(|d| !d.is_empty()).map(PathBuf::from);
        Ok(Self { program, args: spec.args.clone(), env, cwd })
    }

    /// The same launch with `extra` environment variables (secret values) added: they reach
    /// the child through its environment, never its argv.
    pub(crate) fn with_env(&self, extra: Vec<(OsString, OsString)>) -> Self {
        let mut launch = self.clone();
        launch.env.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        launch.env.extend(extra);
        launch
    }
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .finish()
    }
}

struct SpawnRequest {
    launch: Launch,
    runtime: tokio::runtime::Handle,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// The channel to the spawner thread, started on first use; the thread lives as long as the process.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked a child exits, not the
/// process; tokio's worker and blocking threads come and go, so every child is
/// forked here, on a thread that never ends.
fn spawner() -> &'static std_mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<std_mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = std_mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("steward-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so this loop only ends with the process.
                for req in rx {
                    let _guard = req.runtime.enter();
                    let _ = req.reply.send(spawn_here(&req.launch));
                }
            })
            .expect("cannot start the service spawner thread");
        tx
    })
}

fn spawn_here(launch: &Launch) -> io::Result<Child> {
    if let Some(dir) = &launch.cwd
        && !dir.is_dir()
    {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("working directory `{}` does not exist", dir.display()),
        ));
    }
    let mut cmd = Command::new(&launch.program);
    cmd.args(&launch.args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = &launch.cwd {
        cmd.current_dir(dir);
    }
    let host = std::process::id();
    // SAFETY: the closure runs between fork and exec and only makes the
    // async-signal-safe system calls prctl(2) and getppid(2); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) == -1 {
                return Err(io::Error::last_os_error());
            }
            // The host may have died between fork and prctl: then nobody will kill us.
            if libc::getppid() as u32 != host {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Spawns `launch` on the spawner thread, within the caller's tokio runtime.
pub(crate) async fn spawn(launch: Launch) -> io::Result<Child> {
    let (reply, rx) = oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    spawner()
        .send(SpawnRequest { launch, runtime, reply })
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    rx.await.map_err(|_| io::Error::other("the spawner thread dropped the request"))?
}

/// Sends `signal` to every process of group `pgid`; a group that is already gone is no error.
pub(crate) fn signal_group(pgid: u32, signal: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
    if unsafe { libc::kill(-pgid, signal) } == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(pgid, signal, error = %e, "cannot signal process group");
        }
    }
}

/// A spawned child, leader of its own process group.
///
/// Dropping it before it was reaped kills the whole group.
#[derive(Debug)]
pub(crate) struct Proc {
    child: Child,
    /// Its pid, which is also its process group id.
    pub(crate) pid: u32,
    exit: Option<ExitStatus>,
}

impl Proc {
    /// Wraps a child spawned by [`spawn`]; `None` when it already vanished.
    pub(crate) fn new(child: Child) -> Option<Self> {
        let pid = child.id()?;
        Some(Self { child, pid, exit: None })
    }

    /// The child itself, to take its pipes.
    pub(crate) fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Waits for the leader to exit, then kills what is left of its group. Cancel-safe.
    pub(crate) async fn wait(&mut self) -> ExitStatus {
        if let Some(status) = self.exit {
            return status;
        }
        let status = match self.child.wait().await {
            Ok(status) => status,
            Err(e) => {
                // Only possible if the child was reaped behind tokio's back.
                tracing::warn!(pid = self.pid, error = %e, "cannot wait for child");
                ExitStatus::from_raw(libc::SIGKILL)
            }
        };
        self.exit = Some(status);
        signal_group(self.pid, libc::SIGKILL);
        status
    }

    /// Stops the group: SIGTERM, then SIGKILL when the leader is still there after `grace`.
    pub(crate) async fn stop(&mut self, grace: Duration) -> ExitStatus {
        if let Some(status) = self.exit {
            return status;
        }
        signal_group(self.pid, libc::SIGTERM);
        match tokio::time::timeout(grace, self.wait()).await {
            Ok(status) => status,
            Err(_) => {
                tracing::info!(pid = self.pid, ?grace, "service did not stop after SIGTERM; sending SIGKILL");
                signal_group(self.pid, libc::SIGKILL);
                self.wait().await
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exit.is_none() {
            signal_group(self.pid, libc::SIGKILL);
        }
    }
}

/// How a run ended, for people: `exited with code 1`, `killed by signal 9 (SIGKILL)`.
pub(crate) fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with code {code}");
    }
    match status.signal() {
        Some(sig) => match signal_name(sig) {
            Some(name) => format!("killed by signal {sig} ({name})"),
            None => format!("killed by signal {sig}"),
        },
        None => status.to_string(),
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => return None,
    })
}

/// The fields of `/proc/<pid>/stat` the driver needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// `R`, `S`, `Z`, ...
    pub(crate) state: char,
    /// Process group id.
    pub(crate) pgrp: u32,
    /// Session id.
    pub(crate) session: u32,
    /// Start time in clock ticks since boot: with the pid, it names one process.
    pub(crate) start_time: u64,
}

/// Reads `/proc/<pid>/stat`; `None` when there is no such process.
pub(crate) fn proc_stat(pid: u32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(text: &str) -> Option<ProcStat> {
    // `pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    //  utime stime cutime cstime priority nice threads itrealvalue starttime ...`;
    // comm may hold spaces and parentheses, so split after the last `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// True when `pid` no longer runs (absent, or a zombie waiting to be reaped).
#[cfg(test)]
pub(crate) fn is_gone(pid: u32) -> bool {
    proc_stat(pid).is_none_or(|s| s.state == 'Z' || s.state == 'X')
}

/// This boot's id, so records of an earlier boot are never acted on.
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let line = "4242 (a) b (c)) S 1 4242 4200 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let s = parse_stat(line).unwrap();
        assert_eq!(s, ProcStat { state: 'S', pgrp: 4242, session: 4200, start_time: 987654 });
        let me = proc_stat(std::process::id()).unwrap();
        assert!(me.start_time > 0);
    }

    #[test]
    fn exits_read_well() {
        assert_eq!(describe_exit(ExitStatus::from_raw(3 << 8)), "exited with code 3");
        assert_eq!(describe_exit(ExitStatus::from_raw(9)), "killed by signal 9 (SIGKILL)");
    }
}

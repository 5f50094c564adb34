//! The record of live children kept in the state directory, and the reaping of process groups an earlier run left behind.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::process::{self, ProcStat};

/// The file in the state directory that lists the live children.
pub(crate) const STATE_FILE: &str = "services.json";

/// One child as recorded at spawn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildRecord {
    /// The child's pid.
    pub(crate) pid: u32,
    /// Its process group id (equal to `pid`: each child leads its own group).
    pub(crate) pgid: u32,
    /// Its start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub(crate) start_time: u64,
    /// Its session id (the host's).
    pub(crate) session: u32,
    /// The boot it ran in.
    pub(crate) boot_id: String,
    /// The host process that spawned it.
    pub(crate) host_pid: u32,
    /// That host's start time.
    pub(crate) host_start_time: u64,
    /// The owner, as `Kind/namespace/name`.
    pub(crate) owner: String,
    /// The service name.
    pub(crate) service: String,
    /// The program.
    pub(crate) command: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StateDoc {
    children: Vec<ChildRecord>,
}

/// The state file of one running driver: rewritten whole (write, then rename) on every change.
#[derive(Debug)]
pub(crate) struct StateFile {
    path: PathBuf,
    children: Mutex<BTreeMap<u32, ChildRecord>>,
    boot_id: String,
    host_start_time: u64,
}

impl StateFile {
    /// Starts an empty record in `dir`, replacing what an earlier run left (reap that first).
    pub(crate) fn create(dir: &Path) -> io::Result<Self> {
        let me = process::proc_stat(std::process::id());
        let file = Self {
            path: dir.join(STATE_FILE),
            children: Mutex::default(),
            boot_id: process::boot_id(),
            host_start_time: me.map_or(0, |s| s.start_time),
        };
        file.write(&BTreeMap::new())?;
        Ok(file)
    }

    /// Records a child just spawned; a child that already vanished is not recorded.
    pub(crate) fn record(&self, pid: u32, owner: &str, service: &str, command: &str) {
        let Some(stat) = process::proc_stat(pid) else { return };
        let rec = ChildRecord {
            pid,
            pgid: pid,
            start_time: stat.start_time,
            session: stat.session,
            boot_id: self.boot_id.clone(),
            host_pid: std::process::id(),
            host_start_time: self.host_start_time,
            owner: owner.to_string(),
            service: service.to_string(),
            command: command.to_string(),
        };
        let mut children = self.lock();
        children.insert(pid, rec);
        self.write_logged(&children);
    }

    /// Forgets a child whose group is gone.
    pub(crate) fn forget(&self, pid: u32) {
        let mut children = self.lock();
        if children.remove(&pid).is_some() {
            self.write_logged(&children);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, ChildRecord>> {
        self.children.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write_logged(&self, children: &BTreeMap<u32, ChildRecord>) {
        if let Err(e) = self.write(children) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write the services state file");
        }
    }

    fn write(&self, children: &BTreeMap<u32, ChildRecord>) -> io::Result<()> {
        let doc = StateDoc { children: children.values().cloned().collect() };
        let text = serde_json::to_vec_pretty(&doc).map_err(io::Error::other)?;
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.path)
    }
}

/// Replaces the records in `dir` with `children`, as a crashed run would have left them.
#[cfg(test)]
pub(crate) fn write_records(dir: &Path, children: Vec<ChildRecord>) -> io::Result<()> {
    let text = serde_json::to_vec_pretty(&StateDoc { children }).map_err(io::Error::other)?;
    std::fs::write(dir.join(STATE_FILE), text)
}

/// The records in `dir`.
#[cfg(test)]
pub(crate) fn read_records(dir: &Path) -> io::Result<Vec<ChildRecord>> {
    let doc: StateDoc = serde_json::from_slice(&std::fs::read(dir.join(STATE_FILE))?).map_err(io::Error::other)?;
    Ok(doc.children)
}

/// Kills the process groups that the records in `dir` name and that still exist; returns their ids.
///
/// A group is only killed when it is certainly ours: same boot, the host that
/// recorded it is dead (or is this very process), and the group still has
/// members in the recorded session that started no earlier than the recorded
/// leader. A pid or group id reused by an unrelated process fails these tests.
pub(crate) fn reap_orphans(dir: &Path) -> io::Result<Vec<u32>> {
    let path = dir.join(STATE_FILE);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let doc: StateDoc = serde_json::from_slice(&text)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))?;
    if doc.children.is_empty() {
        return Ok(Vec::new());
    }
    let boot = process::boot_id();
    let me = std::process::id();
    let procs = all_processes();
    let mut killed = BTreeSet::new();
    for rec in &doc.children {
        if rec.boot_id != boot {
            continue;
        }
        let host_alive = process::proc_stat(rec.host_pid).is_some_and(|s| s.start_time == rec.host_start_time);
        if host_alive && rec.host_pid != me {
            tracing::info!(
                pid = rec.pid,
                host = rec.host_pid,
                "recorded service belongs to a host that still runs; left alone"
            );
            continue;
        }
        let members: Vec<u32> = procs
            .iter()
            .filter(|(_, s)| {
                s.pgrp == rec.pgid && s.session == rec.session && s.start_time >= rec.start_time && s.state != 'Z'
            })
            .map(|(pid, _)| *pid)
            .collect();
        if members.is_empty() {
            continue;
        }
        tracing::warn!(
            owner = %rec.owner,
            service = %rec.service,
            command = %rec.command,
            pgid = rec.pgid,
            ?members,
            "killing the process group an earlier run left behind"
        );
        process::signal_group(rec.pgid, libc::SIGKILL);
        killed.insert(rec.pgid);
    }
    Ok(killed.into_iter().collect())
}

fn all_processes() -> Vec<(u32, ProcStat)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, process::proc_stat(pid)?)))
        .collect()
}

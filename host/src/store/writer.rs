//! The disk side of the store: reading the redb file at open, and the writer thread that
//! group-commits queued writes and acknowledges them once durable.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::sync::{OnceLock, PoisonError, mpsc};
use std::time::{Duration, Instant};

use redb::{
    Builder, Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition, TableError,
};
use tokio::sync::oneshot;

use super::{LINGER, MAX_BATCH, Record, RecordForm, SOON, StoreError};
use crate::health::{Conditions, STORE_WRITABLE};

/// The page cache of the database (see [`load`]).
const CACHE_SIZE: usize = 3 * 1024 * 1024;

/// Object records: key → the value's bytes ([`Record::encode`]).
pub(super) const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");
/// Host settings: key → text.
pub(super) const META: TableDefinition<&str, &str> = TableDefinition::new("meta");

pub(super) struct Counters {
    pub(super) commits: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) largest_batch: AtomicU64,
    /// Whether commits are failing now.
    pub(super) failed: AtomicBool,
    /// Writes kept in memory, waiting for a commit that succeeds (0 while writing works).
    pub(super) pending: AtomicU64,
    /// Where the writer reports the condition `StoreWritable`, once the host has given one.
    pub(super) conditions: OnceLock<Conditions>,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            commits: AtomicU64::default(),
            writes: AtomicU64::default(),
            largest_batch: AtomicU64::default(),
            failed: AtomicBool::default(),
            pending: AtomicU64::default(),
            conditions: OnceLock::new(),
        }
    }
}

impl Counters {
    /// `StoreWritable` is `True` (reported only once a registry is given, and only on a change).
    fn report_ok(&self, path: &Path) {
        if let Some(c) = self.conditions.get()
            && c.get(STORE_WRITABLE, None).is_none_or(|c| c.status != steward_sdk::ConditionStatus::True)
        {
            c.ok(STORE_WRITABLE, None, "Committing", format!("the state store {} commits its writes", file_name(path)));
        }
    }

    /// `StoreWritable` is `False`, saying why and what to do.
    fn report_failure(&self, path: &Path, detail: &str, kept: usize) {
        let Some(c) = self.conditions.get() else { return };
        let lower = detail.to_ascii_lowercase();
        let (reason, fix) = if lower.contains("no space left") || lower.contains("quota") {
            ("DiskFull", "free space on the file system of the data directory")
        } else {
            ("WriteFailed", "check the disk and the file system of the data directory")
        };
        // The condition is shown remotely, so it names the file, not the host's path (the log
        // line of the failure has the whole path).
        c.fail(
            STORE_WRITABLE,
            None,
            reason,
            format!(
                "the state store {} in the data directory cannot commit ({detail}); {kept} write(s) are kept in \
                 memory and retried; {fix}: writing resumes by itself, no restart needed",
                file_name(path)
            ),
        );
    }
}

/// The last component of `path`, as conditions name the store's file.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// One queued write.
pub(super) enum Op {
    PutRecord(String, Vec<u8>),
    RemoveRecord(String),
    PutMeta(String, String),
    RemoveMeta(String),
    /// Writes nothing; answered once everything queued before it is committed.
    Flush,
    /// Writes nothing, answers no one: a write waits ([`Soon`]) that needs a commit by this
    /// instant (the sender's deadline, not counted from when the writer reads it), sooner than
    /// any asked for since the writes were last taken.
    Wake(Instant),
    /// Makes the writer thread panic as it takes it (tests of a dead writer).
    #[cfg(test)]
    Crash,
}

pub(super) struct Msg {
    pub(super) op: Op,
    /// Where the outcome of its commit goes; `None` when no one asks (a detached write, a
    /// wake-up), which spares the write a channel made on a worker and dropped on this thread.
    pub(super) done: Option<oneshot::Sender<Result<(), StoreError>>>,
}

/// Writes that may wait (put soon or detached), oldest first, not yet sent to the writer: they
/// wait, without waking it, for the end of the earliest window asked for or for the next write
/// that is sent. The sender of any other op holds this lock while it sends, moving what waits
/// here into the queue ahead of its op, so everything here is newer than everything queued.
pub(super) type Soon = std::sync::Mutex<Waiting>;

/// What [`Soon`] holds.
pub(super) struct Waiting {
    /// The writes, oldest first.
    pub(super) msgs: Vec<Msg>,
    /// The earliest commit a [`Op::Wake`] has asked for since the writes were last taken (by
    /// the writer, or moved into the queue by an op that does not wait).
    pub(super) due: Option<Instant>,
    /// How long a write put soon may wait ([`SOON`] unless a test sets it).
    pub(super) soon: Duration,
    /// How long a detached write may wait ([`LINGER`] unless a test sets it).
    pub(super) linger: Duration,
}

impl Default for Waiting {
    fn default() -> Self {
        Self { msgs: Vec::new(), due: None, soon: SOON, linger: LINGER }
    }
}

/// The records in memory, by key.
pub(super) type Records<V> = BTreeMap<Box<str>, Box<V>>;

pub(super) type Loaded<V> = (Database, Records<V>, BTreeMap<String, String>, usize);

/// Opens (or creates) the database and reads both tables. With `form` JSON, the records kept
/// in another form are written again as JSON in one transaction before this returns.
pub(super) fn load<V: Record>(path: &Path, form: RecordForm) -> Result<Loaded<V>, StoreError> {
    let db = Builder::new()
        .set_check_integrity_on_open(true)
        // Reads are served from memory; the cache only helps the writer, which touches the
        // pages of the keys it writes (mostly the same few: the branch pages and the leaves of
        // recent keys). It fills up by 10,000 records whatever its size, so every MiB is
        // resident for good. Taking turns in one run: 4 MiB against 8 (`converge 10000` twice,
        // `converge 100000` once), `host_overhead_ratio` 3.40 / 3.36 / 3.33 against 3.42 / 3.43 /
        // 3.39; 3 MiB against 4 (`converge 100000` twice), 3.83 / 3.80 against 3.91 / 3.83, and
        // `idle 10000` 1.1 MiB less; at 2 MiB the 100,000 cost more CPU (3.44, and 3.8 s of CPU
        // to ready against 2.1).
        .set_cache_size(CACHE_SIZE)
        .create(path)
        .map_err(|e| open_error(path, e))?;
    let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt { path: path.to_path_buf(), detail: e.to_string() };

    let txn = db.begin_read().map_err(|e| corrupt(&e))?;
    let mut records = BTreeMap::new();
    let mut skipped = 0;
    let mut as_json = Vec::new();
    match txn.open_table(RECORDS) {
        Ok(table) => {
            for entry in table.iter().map_err(|e| corrupt(&e))? {
                let (key, value) = entry.map_err(|e| corrupt(&e))?;
                let key = key.value();
                match V::decode(value.value()) {
                    Ok(v) => {
                        if form == RecordForm::Json && V::form_of(value.value()) != RecordForm::Json {
                            let json = v
                                .encode(RecordForm::Json)
                                .map_err(|e| StoreError::Serialize { key: key.to_string(), source: e })?;
                            as_json.push((key.to_string(), json));
                        }
                        records.insert(key.into(), Box::new(v));
                    }
                    Err(e) => {
                        skipped += 1;
                        tracing::warn!(path = %path.display(), key, error = %e, "state store: skipping a record that no longer deserializes");
                    }
                }
            }
        }
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(corrupt(&e)),
    }
    let mut meta = BTreeMap::new();
    match txn.open_table(META) {
        Ok(table) => {
            for entry in table.iter().map_err(|e| corrupt(&e))? {
                let (key, value) = entry.map_err(|e| corrupt(&e))?;
                meta.insert(key.value().to_string(), value.value().to_string());
            }
        }
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(corrupt(&e)),
    }
    drop(txn);
    if !as_json.is_empty() {
        rewrite(&db, &as_json).map_err(|detail| StoreError::Write { path: path.to_path_buf(), detail })?;
        tracing::info!(path = %path.display(), records = as_json.len(), "state store: records written again as JSON (state_format: json)");
    }
    Ok((db, records, meta, skipped))
}

/// Writes `records` (key, bytes) in one durable transaction.
fn rewrite(db: &Database, records: &[(String, Vec<u8>)]) -> Result<(), String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        let mut table = txn.open_table(RECORDS).map_err(|e| e.to_string())?;
        for (key, bytes) in records {
            table.insert(key.as_str(), bytes.as_slice()).map_err(|e| e.to_string())?;
        }
    }
    txn.commit().map_err(|e| e.to_string())
}

fn open_error(path: &Path, e: DatabaseError) -> StoreError {
    let path = path.to_path_buf();
    match e {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => StoreError::InUse { path },
        DatabaseError::Storage(StorageError::Io(source)) if source.kind() != io::ErrorKind::InvalidData => {
            StoreError::Access { path, source }
        }
        other => StoreError::Corrupt { path, detail: other.to_string() },
    }
}

/// The first pause before a failed commit is tried again; it doubles up to [`RETRY_MAX`].
pub(super) const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two tries of a failing commit.
pub const RETRY_MAX: Duration = Duration::from_secs(2);
/// How many more tries a failing commit gets once the store is closing.
const FINAL_TRIES: u32 = 3;

/// The writes of one transaction, coalesced: a key's last op wins, as it would in order. While
/// commits fail, later writes join the same batch, so what is kept in memory is at most one op
/// per key written during the outage, plus one waiter per caller still awaiting.
#[derive(Default)]
struct Batch {
    records: BTreeMap<String, Option<Vec<u8>>>,
    meta: BTreeMap<String, Option<String>>,
    /// Write operations taken (before coalescing), for the counters.
    ops: u64,
    waiters: Vec<oneshot::Sender<Result<(), StoreError>>>,
}

impl Batch {
    fn add(&mut self, msg: Msg) {
        if !matches!(msg.op, Op::Flush) {
            self.ops += 1;
        }
        match msg.op {
            Op::PutRecord(k, v) => drop(self.records.insert(k, Some(v))),
            Op::RemoveRecord(k) => drop(self.records.insert(k, None)),
            Op::PutMeta(k, v) => drop(self.meta.insert(k, Some(v))),
            Op::RemoveMeta(k) => drop(self.meta.insert(k, None)),
            Op::Flush | Op::Wake(_) => {}
            #[cfg(test)]
            Op::Crash => panic!("state store writer: crash requested by a test"),
        }
        self.waiters.extend(msg.done);
    }

    fn writes(&self) -> usize {
        self.records.len() + self.meta.len()
    }

    /// Whether the batch holds nothing: no writes kept (a failing commit keeps its writes, though
    /// their callers may have gone) and no caller waiting (a flush).
    fn is_empty(&self) -> bool {
        self.waiters.is_empty() && self.writes() == 0
    }

    /// Answers every waiter: committed, or (`failure`: the store file and what failed) not.
    fn answer(&mut self, failure: Option<(&Path, &str)>) {
        for done in self.waiters.drain(..) {
            let answer = match failure {
                None => Ok(()),
                Some((path, detail)) => Err(StoreError::Write { path: path.to_path_buf(), detail: detail.to_string() }),
            };
            // The caller may have dropped its future; the write stands regardless.
            let _ = done.send(answer);
        }
    }
}

/// Opens the database file for writing again after a failed commit (redb refuses every write
/// transaction of a handle after an I/O error); redb repairs the file on open.
fn reopen(path: &Path) -> Result<Database, String> {
    Builder::new().set_cache_size(CACHE_SIZE).create(path).map_err(|e| e.to_string())
}

/// The writer thread: batch, commit, acknowledge, until every sender is gone. A failed commit
/// keeps its writes, reopens the file and tries again with backoff, taking new writes into the
/// same batch; its callers wait. Once the store closes, a failing batch gets [`FINAL_TRIES`]
/// more tries; returns the failure if it never committed. Waiting writes ([`Soon`]: put soon or
/// detached) join the next commit, or are committed on their own at the earliest deadline one
/// of them asked for.
pub(super) fn writer_loop(
    db: Database,
    rx: mpsc::Receiver<Msg>,
    soon: &Soon,
    counters: &Counters,
    path: &Path,
) -> Result<(), String> {
    let mut db = Some(db);
    let mut batch = Batch::default();
    let mut failing: Option<String> = None;
    let mut pause = RETRY_FIRST;
    let mut open = true;
    let mut final_tries = 0;
    // When the waiting writes (put soon or detached) are due, once one has said it waits.
    let mut soon_due: Option<Instant> = None;
    let take = |batch: &mut Batch, msg: Msg, soon_due: &mut Option<Instant>| match msg.op {
        Op::Wake(due) => *soon_due = Some(soon_due.map_or(due, |d| d.min(due))),
        _ => batch.add(msg),
    };
    // Takes what is queued, at most `limit` ops.
    let drain = |batch: &mut Batch, soon_due: &mut Option<Instant>, open: &mut bool, limit: u64| {
        let taken = batch.ops;
        while *open && batch.ops - taken < limit {
            match rx.try_recv() {
                Ok(msg) => take(batch, msg, soon_due),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => *open = false,
            }
        }
    };
    loop {
        if batch.is_empty() {
            if !open {
                break;
            }
            let next = match soon_due {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(due) => rx.recv_timeout(due.saturating_duration_since(Instant::now())),
            };
            match next {
                Ok(msg) => take(&mut batch, msg, &mut soon_due),
                Err(RecvTimeoutError::Timeout) => soon_due = None,
                Err(RecvTimeoutError::Disconnected) => open = false,
            }
            // Nothing to commit yet unless a write came, the window ended or the store closes.
            if batch.is_empty() && soon_due.is_some() && open {
                continue;
            }
        } else if failing.is_some() {
            // Wait out the pause, taking new writes meanwhile.
            let until = Instant::now() + pause;
            while open {
                match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                    Ok(msg) => take(&mut batch, msg, &mut soon_due),
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => open = false,
                }
            }
            // A waiter whose caller went away needs no answer.
            batch.waiters.retain(|w| !w.is_closed());
        }
        drain(&mut batch, &mut soon_due, &mut open, MAX_BATCH as u64);
        // Every commit takes the waiting writes along, after everything queued before them
        // (all of it: none is sent while the lock is held).
        {
            let mut waiting = soon.lock().unwrap_or_else(PoisonError::into_inner);
            if !waiting.msgs.is_empty() {
                drain(&mut batch, &mut soon_due, &mut open, u64::MAX);
                for msg in waiting.msgs.drain(..) {
                    batch.add(msg);
                }
            }
            waiting.due = None;
            soon_due = None;
        }
        if batch.is_empty() {
            continue;
        }

        let result = if batch.writes() == 0 {
            Ok(())
        } else {
            let handle = match db.take() {
                Some(d) => Ok(d),
                None => reopen(path),
            };
            match handle {
                Ok(d) => {
                    let r = commit(&d, &batch);
                    // After a failed commit the handle refuses every write: drop it, reopen next time.
                    if r.is_ok() {
                        db = Some(d);
                    }
                    r
                }
                Err(e) => Err(e),
            }
        };
        match result {
            Ok(()) => {
                if batch.ops > 0 {
                    counters.commits.fetch_add(1, Ordering::Relaxed);
                    counters.writes.fetch_add(batch.ops, Ordering::Relaxed);
                    counters.largest_batch.fetch_max(batch.ops, Ordering::Relaxed);
                }
                if failing.take().is_some() {
                    tracing::info!(path = %path.display(), "state store: writing again; every kept write is committed");
                    counters.failed.store(false, Ordering::Relaxed);
                }
                counters.pending.store(0, Ordering::Relaxed);
                counters.report_ok(path);
                batch.answer(None);
                batch = Batch::default();
                pause = RETRY_FIRST;
            }
            Err(detail) => {
                if failing.is_none() {
                    tracing::error!(path = %path.display(), "state store: commit failed; the writes are kept and retried: {detail}");
                    counters.failed.store(true, Ordering::Relaxed);
                }
                counters.pending.store(batch.writes() as u64, Ordering::Relaxed);
                counters.report_failure(path, &detail, batch.writes());
                failing = Some(detail.clone());
                pause = (pause * 2).min(RETRY_MAX);
                if !open {
                    final_tries += 1;
                    if final_tries > FINAL_TRIES {
                        batch.answer(Some((path, &detail)));
                        return Err(detail);
                    }
                    pause = pause.min(Duration::from_secs(1));
                }
            }
        }
    }
    match db {
        Some(d) => d.close().map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

/// Applies a batch in one durable write transaction.
fn commit(db: &Database, batch: &Batch) -> Result<(), String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        let mut records = txn.open_table(RECORDS).map_err(|e| e.to_string())?;
        for (key, value) in &batch.records {
            match value {
                Some(bytes) => records.insert(key.as_str(), bytes.as_slice()).map(drop),
                None => records.remove(key.as_str()).map(drop),
            }
            .map_err(|e| e.to_string())?;
        }
        let mut meta = txn.open_table(META).map_err(|e| e.to_string())?;
        for (key, value) in &batch.meta {
            match value {
                Some(v) => meta.insert(key.as_str(), v.as_str()).map(drop),
                None => meta.remove(key.as_str()).map(drop),
            }
            .map_err(|e| e.to_string())?;
        }
    }
    // Default durability (Immediate): the commit is on disk when this returns.
    txn.commit().map_err(|e| e.to_string())
}

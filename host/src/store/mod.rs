//! The embedded ACID state store: one record per object key, plus a small table of host
//! settings ("meta"), kept in a redb file and mirrored in memory.
//!
//! A record is kept in the form its type gives it ([`Record`]): the status record in a compact
//! binary form, anything else (and the status record with [`RecordForm::Json`]) as JSON. Either
//! form is read whatever the setting, so a file written by an earlier version still loads.
//!
//! Reads ([`Store::get`], [`Store::keys`], [`Store::all`], [`Store::get_meta`]) are served from
//! memory and never touch the disk. Writes update memory at once and are then group-committed by
//! one writer thread: it takes everything queued (up to [`MAX_BATCH`] operations, and every write
//! waiting for company), applies it in one redb write transaction, commits durably, and only
//! then acknowledges every write of the batch. A write's future therefore resolves only once a
//! crash can no longer lose it, while thousands of writes per second share a handful of fsyncs. A write no caller awaits
//! ([`Store::put_detached`]) waits up to [`LINGER`] for more writes to share its commit, without
//! waking the writer for each.
//!
//! A write that records nothing but the passing of time (a resync's timestamps) can be put with
//! [`Store::put_soon`]: its commit waits up to [`SOON`] for other writes to share it, so writes
//! that arrive one at a time do not each pay a commit. Any write that does not wait, and closing
//! the store, commits it at once; a detached write brings its commit forward to the end of its
//! own shorter wait. A crash within the window loses it, and nothing else.
//!
//! Writes are submitted when [`Store::put`] (or [`Store::remove`], …) is *called*, not when its
//! future is first polled: the returned future only waits for the acknowledgement, and dropping
//! it does not withdraw the write.
//!
//! If a commit fails (disk full, I/O error), nothing is dropped: the writer keeps the batch,
//! reopens the file (redb refuses every write of a handle after an I/O error, and repairs the
//! file on open) and tries again with backoff ([`RETRY_MAX`] at most between tries), taking the
//! writes that arrive meanwhile into the same batch, one op per key (a key's last write wins).
//! Callers that await a write wait until it is committed; memory holds at most one pending op
//! per key written during the outage. While it fails, [`StoreStats::failed`] is set and the
//! condition `StoreWritable` of the registry given to [`Store::report_to`] is `False`; the first
//! commit that succeeds clears both. Closing the store during an outage gives the batch a few
//! more tries, then answers its callers with [`StoreError::Write`] and returns that error.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, oneshot};

mod binary;
mod record;
mod status;
mod writer;

pub use record::{DecodeError, Record, RecordForm};
pub use writer::RETRY_MAX;
use writer::{Counters, Msg, Op, Records, Soon, load, writer_loop};

/// Where the outcome of a write's commit arrives, when its caller asked for one.
type Answer = Option<oneshot::Receiver<Result<(), StoreError>>>;

/// The most write operations one transaction takes.
pub const MAX_BATCH: usize = 4096;

/// How long a write put with [`Store::put_soon`] may wait for others to share its commit.
pub const SOON: Duration = Duration::from_millis(500);

/// How long a write put with [`Store::put_detached`] may wait for others to share its commit.
pub const LINGER: Duration = Duration::from_millis(10);

/// How long a write may wait for others to share its commit.
#[derive(Clone, Copy)]
enum Wait {
    /// Not at all: it is committed with whatever is queued.
    No,
    /// Up to [`SOON`].
    Soon,
    /// Up to [`LINGER`].
    Linger,
}

/// How long closing (or dropping) a store waits for the writer thread to commit what is queued.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// An error of the state store. Every message names the store file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The directory for the store file could not be created.
    #[error("cannot create the directory {} for the state store: {source}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The store file exists but cannot be read or written (permissions, I/O).
    #[error("cannot access the state store {}: {source}; check that the file and its directory are readable and writable by this user", path.display())]
    Access {
        /// The store file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Another process (or another `Store` in this process) has the file open.
    #[error("the state store {} is already in use by another process; stop the other steward, or give this one a different state directory", path.display())]
    InUse {
        /// The store file.
        path: PathBuf,
    },
    /// The file is not a readable redb database: corrupt, truncated, not a store at all, or
    /// written by an incompatible redb version.
    #[error("the state store {} is unreadable ({detail}); move it away (for example `mv {p} {p}.broken`) to start with an empty store, statuses are rebuilt by the next reconciles", path.display(), p = path.display())]
    Corrupt {
        /// The store file.
        path: PathBuf,
        /// What redb reported.
        detail: String,
    },
    /// A value could not be encoded (only JSON can refuse one).
    #[error("cannot serialize the record {key} for the state store: {source}")]
    Serialize {
        /// The record's key.
        key: String,
        /// Why.
        source: serde_json::Error,
    },
    /// A write could not be committed before the store closed; it is not durable.
    #[error("writing to the state store {} failed: {detail}; free space or fix the I/O error on its file system, then start the host again (the store repairs itself on open)", path.display())]
    Write {
        /// The store file.
        path: PathBuf,
        /// What redb reported.
        detail: String,
    },
    /// The writer thread is gone (closed or crashed); writes are no longer accepted.
    #[error("the state store {} is closed; the write was not saved", path.display())]
    Closed {
        /// The store file.
        path: PathBuf,
    },
    /// The writer thread did not finish committing within the shutdown timeout.
    #[error("the state store {} did not finish its last commit within {timeout:?}", path.display())]
    ShutdownTimeout {
        /// The store file.
        path: PathBuf,
        /// How long it waited.
        timeout: Duration,
    },
    /// The writer thread could not be started.
    #[error("cannot start the writer thread of the state store {}: {source}", path.display())]
    Spawn {
        /// The store file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// How many changes a subscriber may fall behind before it is told it lagged.
pub const CHANGES_CAPACITY: usize = 1024;

/// A change to the store, as [`Store::subscribe`] reports it: which record or setting was put
/// or removed. Read the store for what it holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The record of this key was put or removed.
    Record(String),
    /// The host setting of this key was put or removed.
    Meta(String),
}

/// Counters of the writer, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Write transactions committed.
    pub commits: u64,
    /// Write operations (puts and removes, records and meta) committed.
    pub writes: u64,
    /// The most write operations one commit carried.
    pub largest_batch: u64,
    /// Whether commits are failing now (the writes are kept and retried).
    pub failed: bool,
    /// Writes kept in memory while commits fail, one per key (0 while writing works).
    pub pending: u64,
    /// Writes waiting for company (put soon or detached), not yet handed to the writer.
    pub waiting: u64,
}

/// The state store, generic over the record type. Share it as `Arc<Store<V>>`.
pub struct Store<V> {
    path: PathBuf,
    /// The form records are written in.
    form: RecordForm,
    /// Each record boxed: a B-tree node then holds a pointer per slot rather than a whole
    /// record, so its unfilled slots (about a third after ordered inserts) cost 8 bytes, not
    /// several hundred.
    records: RwLock<Records<V>>,
    meta: RwLock<BTreeMap<String, String>>,
    /// `None` once closed. Sent to while holding the lock of the map the op changes, so the
    /// order of the queue is the order of the in-memory updates.
    tx: Option<mpsc::Sender<Msg>>,
    /// Writes that may wait (put soon or detached), waiting for the writer's next commit (see [`Soon`]).
    soon: Arc<Soon>,
    writer: Option<JoinHandle<Result<(), String>>>,
    counters: Arc<Counters>,
    skipped_on_open: usize,
    /// Every change, for subscribers; nothing is built or sent while there are none.
    changes: broadcast::Sender<Change>,
}

impl<V> Store<V>
where
    V: Record,
{
    /// Opens the store at `path`, creating it (and its parent directories) if missing, and
    /// loads every record into memory. Blocking: it reads and checks the whole file.
    ///
    /// A record that no longer decodes as `V` is left in the file, kept out of memory, logged
    /// and counted in [`Self::skipped_on_open`].
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] for a file that is not a sound redb database (the message says to
    /// move it away), [`StoreError::InUse`] when another process has it open,
    /// [`StoreError::Access`] or [`StoreError::CreateDir`] for I/O and permission problems.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_as(path, RecordForm::default())
    }

    /// [`Self::open`], writing records in `form`. With [`RecordForm::Json`], records kept in
    /// another form are written again as JSON before this returns.
    ///
    /// # Errors
    ///
    /// Those of [`Self::open`], and [`StoreError::Write`] when the records to write again as
    /// JSON cannot be committed.
    pub fn open_as(path: &Path, form: RecordForm) -> Result<Self, StoreError> {
        let path = path.to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir { dir: dir.to_path_buf(), source })?;
        }

        // A plain redb open trusts the file and may panic on damage; the integrity check makes
        // it an error instead. The catch is for what a debug build of redb still asserts.
        let loaded = panic::catch_unwind(AssertUnwindSafe(|| load::<V>(&path, form)));
        let (db, records, meta, skipped) = match loaded {
            Ok(result) => result?,
            Err(payload) => {
                let what = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown");
                let detail = format!("redb panicked while reading it: {what}");
                return Err(StoreError::Corrupt { path, detail });
            }
        };
        if skipped > 0 {
            tracing::warn!(path = %path.display(), skipped, "state store: records that no longer deserialize were skipped");
        }

        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let soon = Arc::new(Soon::default());
        let writer = {
            let counters = counters.clone();
            let soon = soon.clone();
            let writer_path = path.clone();
            thread::Builder::new()
                .name("steward-store".to_string())
                .spawn(move || writer_loop(db, rx, &soon, &counters, &writer_path))
                .map_err(|source| StoreError::Spawn { path: path.clone(), source })?
        };

        Ok(Self {
            path,
            form,
            records: RwLock::new(records),
            meta: RwLock::new(meta),
            tx: Some(tx),
            soon,
            writer: Some(writer),
            counters,
            skipped_on_open: skipped,
            changes: broadcast::channel(CHANGES_CAPACITY).0,
        })
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many records were skipped on open because they no longer deserialize.
    pub fn skipped_on_open(&self) -> usize {
        self.skipped_on_open
    }

    /// The record of `key`, reflecting every put and remove already called.
    pub fn get(&self, key: &str) -> Option<V> {
        read(&self.records).get(key).map(|v| V::clone(v))
    }

    /// `f` applied to the record of `key`, without cloning the record.
    pub fn get_with<R>(&self, key: &str, f: impl FnOnce(&V) -> R) -> Option<R> {
        read(&self.records).get(key).map(|v| f(v))
    }

    /// Calls `f` on every record in key order, without cloning them; holds a read lock meanwhile.
    pub fn for_each(&self, mut f: impl FnMut(&str, &V)) {
        for (k, v) in read(&self.records).iter() {
            f(k, v);
        }
    }

    /// Whether `key` has a record.
    pub fn contains(&self, key: &str) -> bool {
        read(&self.records).contains_key(key)
    }

    /// Every key, sorted.
    pub fn keys(&self) -> Vec<String> {
        read(&self.records).keys().map(|k| k.to_string()).collect()
    }

    /// Every record, sorted by key.
    pub fn all(&self) -> Vec<(String, V)> {
        read(&self.records).iter().map(|(k, v)| (k.to_string(), V::clone(v))).collect()
    }

    /// How many records there are.
    pub fn len(&self) -> usize {
        read(&self.records).len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        read(&self.records).is_empty()
    }

    /// Sets the record of `key`. Memory is updated before this returns; the future resolves
    /// once the write is durably committed.
    pub fn put(&self, key: String, value: V) -> impl Future<Output = Result<(), StoreError>> + Send + 'static + use<V> {
        self.put_when(key, value, Wait::No)
    }

    /// [`Self::put`] for a write whose loss in a crash costs nothing that matters (it records
    /// only when something happened): its commit may wait up to [`SOON`] for other writes to
    /// share it. Memory is updated at once, and every later write that does not wait itself (or
    /// a [`Self::flush`], or closing the store) commits it along; a detached write
    /// ([`Self::put_detached`]) brings its commit forward to the end of its own shorter wait.
    pub fn put_soon(
        &self,
        key: String,
        value: V,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static + use<V> {
        self.put_when(key, value, Wait::Soon)
    }

    /// [`Self::put`] for a caller that does not wait for the commit (a record whose loss in a
    /// crash costs only a repeated reconcile): memory is updated at once, and the commit may
    /// wait up to [`LINGER`] for other writes to share it, without waking the writer for each;
    /// any write that is not itself waiting (or a flush, or closing the store) commits it along.
    /// A failing commit is the writer's to report (`StoreWritable`); a value that cannot be
    /// serialized, or a store already closed, is logged. If the writer thread has died, the
    /// write stays in memory only, as a write put soon does.
    pub fn put_detached(&self, key: String, value: V) {
        self.put_unanswered(key, value, Wait::Linger);
    }

    /// [`Self::put_soon`] for a caller that does not wait for the commit: as
    /// [`Self::put_detached`], but sharing the next commit within [`SOON`].
    pub fn put_soon_detached(&self, key: String, value: V) {
        self.put_unanswered(key, value, Wait::Soon);
    }

    /// A write no one awaits: queued without a reply channel; a refusal is logged.
    fn put_unanswered(&self, key: String, value: V, wait: Wait) {
        if let Err(e) = self.put_as(key, value, wait, false) {
            tracing::error!(error = %e, "state store: a write was refused");
        }
    }

    fn put_when(
        &self,
        key: String,
        value: V,
        wait: Wait,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static + use<V> {
        let submitted = self.put_as(key, value, wait, true);
        self.acknowledgement(submitted)
    }

    /// Updates memory and queues the write; with `answered`, the receiver of its commit's outcome.
    fn put_as(&self, key: String, value: V, wait: Wait, answered: bool) -> Result<Answer, StoreError> {
        match value.encode(self.form) {
            Ok(bytes) => {
                let mut records = write(&self.records);
                let submitted = self.submit_when(Op::PutRecord(key.clone(), bytes), wait, answered);
                if submitted.is_ok() {
                    self.publish(|| Change::Record(key.clone()));
                    // An update writes into the record's box, keeping its key and allocation.
                    match records.get_mut(key.as_str()) {
                        Some(slot) => **slot = value,
                        None => drop(records.insert(key.into_boxed_str(), Box::new(value))),
                    }
                }
                submitted
            }
            Err(source) => Err(StoreError::Serialize { key, source }),
        }
    }

    /// Removes the record of `key` (also one that was skipped on open). Memory is updated before
    /// this returns; the future resolves once the removal is durably committed.
    pub fn remove(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send + 'static + use<V> {
        let submitted = {
            let mut records = write(&self.records);
            let submitted = self.submit(Op::RemoveRecord(key.to_string()));
            if submitted.is_ok() {
                records.remove(key);
                self.publish(|| Change::Record(key.to_string()));
            }
            submitted
        };
        self.acknowledgement(submitted)
    }

    /// Resolves once everything submitted before this call is durably committed.
    pub fn flush(&self) -> impl Future<Output = Result<(), StoreError>> + Send + 'static + use<V> {
        self.acknowledgement(self.submit(Op::Flush))
    }

    /// The host setting `key`.
    pub fn get_meta(&self, key: &str) -> Option<String> {
        read(&self.meta).get(key).cloned()
    }

    /// Every host setting, sorted by key.
    pub fn all_meta(&self) -> Vec<(String, String)> {
        read(&self.meta).iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Sets the host setting `key`, with the durability of [`Self::put`].
    pub fn put_meta(
        &self,
        key: String,
        value: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static + use<V> {
        let submitted = {
            let mut meta = write(&self.meta);
            let submitted = self.submit(Op::PutMeta(key.clone(), value.clone()));
            if submitted.is_ok() {
                self.publish(|| Change::Meta(key.clone()));
                meta.insert(key, value);
            }
            submitted
        };
        self.acknowledgement(submitted)
    }

    /// Removes the host setting `key`, with the durability of [`Self::put`].
    pub fn remove_meta(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send + 'static + use<V> {
        let submitted = {
            let mut meta = write(&self.meta);
            let submitted = self.submit(Op::RemoveMeta(key.to_string()));
            if submitted.is_ok() {
                meta.remove(key);
                self.publish(|| Change::Meta(key.to_string()));
            }
            submitted
        };
        self.acknowledgement(submitted)
    }

    /// Every later put and remove, of records and settings, in the order memory saw them. A
    /// subscriber is told each change once it is visible to reads (the lock of the changed map
    /// is held while sending, so a reader woken by it sees the new value); one that falls more
    /// than [`CHANGES_CAPACITY`] behind gets `Lagged` and should read everything again.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// The writer's counters.
    pub fn stats(&self) -> StoreStats {
        let c = &self.counters;
        StoreStats {
            commits: c.commits.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            largest_batch: c.largest_batch.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            pending: c.pending.load(Ordering::Relaxed),
            waiting: self.soon.lock().unwrap_or_else(PoisonError::into_inner).msgs.len() as u64,
        }
    }

    /// Reports the condition `StoreWritable` to `conditions` from now on: `True` at once when
    /// commits work, `False` with the reason while they fail. Only the first registry given is kept.
    pub fn report_to(&self, conditions: &crate::health::Conditions) {
        if self.counters.conditions.set(conditions.clone()).is_ok() && !self.counters.failed.load(Ordering::Relaxed) {
            conditions.ok(
                crate::health::STORE_WRITABLE,
                None,
                "Committing",
                format!("the state store {} commits its writes", self.path.display()),
            );
        }
    }

    /// Sets how long writes put soon wait for company (tests; the default is [`SOON`]).
    #[cfg(test)]
    pub(crate) fn set_soon_window(&self, window: Duration) {
        self.soon.lock().unwrap_or_else(PoisonError::into_inner).soon = window;
    }

    /// Sets how long detached writes wait for company (tests; the default is [`LINGER`]).
    #[cfg(test)]
    pub(crate) fn set_linger(&self, window: Duration) {
        self.soon.lock().unwrap_or_else(PoisonError::into_inner).linger = window;
    }

    /// Stops the writer after it has committed everything queued, and closes the file.
    /// Blocking, for at most [`SHUTDOWN_TIMEOUT`]. Dropping the store does the same, ignoring
    /// errors.
    ///
    /// # Errors
    ///
    /// [`StoreError::Write`] if a commit failed during the store's life (or closing the file
    /// failed), [`StoreError::Closed`] if the writer thread died, and
    /// [`StoreError::ShutdownTimeout`].
    pub fn close(mut self) -> Result<(), StoreError> {
        self.shutdown()
    }

    /// Queues `op` to be committed at once. Callers that change memory hold that map's lock
    /// across this call.
    fn submit(&self, op: Op) -> Result<Answer, StoreError> {
        self.submit_when(op, Wait::No, true)
    }

    /// Queues `op`. An op that may wait ([`Wait::Soon`], [`Wait::Linger`]) waits for the
    /// writer's next commit without waking it, but for one that needs a commit sooner than any
    /// asked for since the waiting ops were last taken, which asks for one at the end of its
    /// window, and the one that would make [`MAX_BATCH`] wait, which is sent at once. Any other
    /// op moves the waiting ops into the queue ahead of itself, keeping their order.
    fn submit_when(&self, op: Op, wait: Wait, answered: bool) -> Result<Answer, StoreError> {
        let (done, ack) = if answered {
            let (done, ack) = oneshot::channel();
            (Some(done), Some(ack))
        } else {
            (None, None)
        };
        let tx = self.tx.as_ref().ok_or_else(|| self.closed())?;
        let closed = |_| self.closed();
        let mut waiting = self.soon.lock().unwrap_or_else(PoisonError::into_inner);
        let window = match wait {
            Wait::No => None,
            Wait::Soon => Some(waiting.soon),
            Wait::Linger => Some(waiting.linger),
        };
        // At most a batch waits: the op that would fill it is sent at once, with the rest.
        match window {
            Some(window) if waiting.msgs.len() + 1 < MAX_BATCH => {
                let due = Instant::now() + window;
                if waiting.due.is_none_or(|asked| due < asked) {
                    tx.send(Msg { op: Op::Wake(due), done: None }).map_err(closed)?;
                    waiting.due = Some(due);
                }
                waiting.msgs.push(Msg { op, done });
            }
            _ => {
                for msg in waiting.msgs.drain(..) {
                    tx.send(msg).map_err(closed)?;
                }
                waiting.due = None;
                tx.send(Msg { op, done }).map_err(closed)?;
            }
        }
        Ok(ack)
    }

    fn acknowledgement(
        &self,
        submitted: Result<Answer, StoreError>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'static + use<V> {
        let path = self.path.clone();
        async move {
            let Some(answer) = submitted? else { return Ok(()) };
            match answer.await {
                Ok(result) => result,
                // The writer dropped the answer: it died before committing this write.
                Err(_) => Err(StoreError::Closed { path }),
            }
        }
    }
}

impl<V> Store<V> {
    /// Sends the change `make` builds to the subscribers, if there are any (no cost otherwise).
    fn publish(&self, make: impl FnOnce() -> Change) {
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send(make());
        }
    }

    fn closed(&self) -> StoreError {
        StoreError::Closed { path: self.path.clone() }
    }

    /// Closes the queue and waits, at most [`SHUTDOWN_TIMEOUT`], for the writer to commit what
    /// is queued and close the file. Idempotent.
    fn shutdown(&mut self) -> Result<(), StoreError> {
        // Dropping the only sender lets the writer drain the queue and exit.
        drop(self.tx.take());
        let Some(writer) = self.writer.take() else {
            return Ok(());
        };
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        let mut pause = Duration::from_micros(100);
        while !writer.is_finished() {
            if Instant::now() >= deadline {
                return Err(StoreError::ShutdownTimeout { path: self.path.clone(), timeout: SHUTDOWN_TIMEOUT });
            }
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
        match writer.join() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(detail)) => Err(StoreError::Write { path: self.path.clone(), detail }),
            Err(_) => Err(self.closed()),
        }
    }
}

impl<V> Drop for Store<V> {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!("{e}");
        }
    }
}

impl<V> std::fmt::Debug for Store<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish_non_exhaustive()
    }
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod full_disk_tests;

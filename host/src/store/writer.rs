//! The disk side of the store: reading the redb file at open, and the writer thread that
//! group-commits queued writes and acknowledges them once durable.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

use redb::{
    Builder, Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition, TableError,
};
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use super::{MAX_BATCH, StoreError};

/// Object records: key → JSON of the value.
pub(super) const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");
/// Host settings: key → text.
pub(super) const META: TableDefinition<&str, &str> = TableDefinition::new("meta");

#[derive(Default)]
pub(super) struct Counters {
    pub(super) commits: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) largest_batch: AtomicU64,
    pub(super) failed: AtomicBool,
}

/// One queued write.
pub(super) enum Op {
    PutRecord(String, Vec<u8>),
    RemoveRecord(String),
    PutMeta(String, String),
    RemoveMeta(String),
    /// Writes nothing; answered once everything queued before it is committed.
    Flush,
    /// Makes the writer thread panic (tests of a dead writer).
    #[cfg(test)]
    Crash,
}

pub(super) struct Msg {
    pub(super) op: Op,
    pub(super) done: oneshot::Sender<Result<(), StoreError>>,
}

/// The records in memory, by key.
pub(super) type Records<V> = BTreeMap<Box<str>, Box<V>>;

pub(super) type Loaded<V> = (Database, Records<V>, BTreeMap<String, String>, usize);

/// Opens (or creates) the database and reads both tables.
pub(super) fn load<V: DeserializeOwned>(path: &Path) -> Result<Loaded<V>, StoreError> {
    let db = Builder::new()
        .set_check_integrity_on_open(true)
        // Reads are served from memory; the cache only helps the writer, which touches the
        // pages of the keys it writes (mostly the same few: the branch pages and the leaves of
        // recent keys). It fills up by 10,000 records whatever its size, so every MiB is
        // resident for good: at 4 MiB rather than 16 the host converging 100,000 objects held
        // 13 MiB less; its CPU per reconcile was 71-75 µs against 65 µs, in runs on a loaded
        // machine, so not told apart from noise. 8 MiB keeps a margin for the writer.
        .set_cache_size(8 * 1024 * 1024)
        .create(path)
        .map_err(|e| open_error(path, e))?;
    let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt { path: path.to_path_buf(), detail: e.to_string() };

    let txn = db.begin_read().map_err(|e| corrupt(&e))?;
    let mut records = BTreeMap::new();
    let mut skipped = 0;
    match txn.open_table(RECORDS) {
        Ok(table) => {
            for entry in table.iter().map_err(|e| corrupt(&e))? {
                let (key, value) = entry.map_err(|e| corrupt(&e))?;
                let key = key.value();
                match serde_json::from_slice::<V>(value.value()) {
                    Ok(v) => {
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
    Ok((db, records, meta, skipped))
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

/// The writer thread: batch, commit, acknowledge, until every sender is gone. Returns the
/// sticky failure, if any.
pub(super) fn writer_loop(
    db: Database,
    rx: mpsc::Receiver<Msg>,
    counters: &Counters,
    path: &Path,
) -> Result<(), String> {
    let mut failure: Option<String> = None;
    let mut batch: Vec<Msg> = Vec::with_capacity(64);
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(msg) => batch.push(msg),
                Err(_) => break,
            }
        }
        #[cfg(test)]
        if batch.iter().any(|m| matches!(m.op, Op::Crash)) {
            panic!("state store writer: crash requested by a test");
        }

        let writes = batch.iter().filter(|m| !matches!(m.op, Op::Flush)).count();
        let result = match &failure {
            Some(detail) => Err(detail.clone()),
            None if writes == 0 => Ok(()),
            None => commit(&db, &batch),
        };
        match &result {
            Ok(()) if writes > 0 => {
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters.writes.fetch_add(writes as u64, Ordering::Relaxed);
                counters.largest_batch.fetch_max(writes as u64, Ordering::Relaxed);
            }
            Ok(()) => {}
            Err(detail) => {
                if failure.is_none() {
                    tracing::error!(path = %path.display(), "state store: commit failed, refusing further writes: {detail}");
                    counters.failed.store(true, Ordering::Relaxed);
                    failure = Some(detail.clone());
                }
            }
        }
        for msg in batch.drain(..) {
            let answer = result.clone().map_err(|detail| StoreError::Write { path: path.to_path_buf(), detail });
            // The caller may have dropped its future; the write stands regardless.
            let _ = msg.done.send(answer);
        }
    }
    let closed = db.close().map_err(|e| e.to_string());
    match failure {
        Some(detail) => Err(detail),
        None => closed,
    }
}

/// Applies a batch in one durable write transaction. Later ops on a key overwrite earlier ones.
fn commit(db: &Database, batch: &[Msg]) -> Result<(), String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        let mut records = txn.open_table(RECORDS).map_err(|e| e.to_string())?;
        let mut meta = txn.open_table(META).map_err(|e| e.to_string())?;
        for msg in batch {
            match &msg.op {
                Op::PutRecord(key, bytes) => records.insert(key.as_str(), bytes.as_slice()).map(drop),
                Op::RemoveRecord(key) => records.remove(key.as_str()).map(drop),
                Op::PutMeta(key, value) => meta.insert(key.as_str(), value.as_str()).map(drop),
                Op::RemoveMeta(key) => meta.remove(key.as_str()).map(drop),
                Op::Flush => Ok(()),
                #[cfg(test)]
                Op::Crash => Ok(()),
            }
            .map_err(|e| e.to_string())?;
        }
    }
    // Default durability (Immediate): the commit is on disk when this returns.
    txn.commit().map_err(|e| e.to_string())
}

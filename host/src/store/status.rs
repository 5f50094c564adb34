//! The status record's binary form: every field in declaration order, with no names.
//!
//! A record starts with its form's byte, [`FORM_1`]; JSON starts with `{` (or white space), so
//! the two are told apart by the first byte and records written by earlier versions still
//! read. A field added to [`StatusRecord`] needs a new form byte, with the old one still read.
//! The texts that recur in every record (the plugin's name and version, the apiVersion, the
//! outcome of each reconcile) are read as one shared copy ([`Name::interned`]).

use std::collections::VecDeque;

use steward_sdk::{Condition, ConditionStatus};

use super::binary::{BinaryError, Reader, Writer};
use super::record::{DecodeError, Record, RecordForm};
use crate::model::{FieldWarning, HistoryEntry, Name, Phase, Reason, SourceLocation, StatusRecord, WarningSource};

/// The first byte of a record in the binary form this host writes.
pub const FORM_1: u8 = 1;

impl Record for StatusRecord {
    fn encode(&self, form: RecordForm) -> Result<Vec<u8>, serde_json::Error> {
        match form {
            RecordForm::Json => serde_json::to_vec(self),
            RecordForm::Binary => Ok(encode(self)),
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        match bytes.first() {
            Some(&FORM_1) => {
                let mut r = Reader::new(bytes);
                r.byte()?;
                let rec = decode(&mut r)?;
                r.finish()?;
                Ok(rec)
            }
            Some(&b) if is_form_byte(b) => Err(DecodeError::UnknownForm(b)),
            _ => Ok(serde_json::from_slice(bytes)?),
        }
    }

    fn form_of(bytes: &[u8]) -> RecordForm {
        if bytes.first().is_some_and(|&b| is_form_byte(b)) { RecordForm::Binary } else { RecordForm::Json }
    }
}

/// Whether a record's first byte names a binary form: a control character JSON never starts
/// with (JSON may start with white space, which is never a form).
fn is_form_byte(b: u8) -> bool {
    b < 0x20 && !b.is_ascii_whitespace()
}

fn encode(rec: &StatusRecord) -> Vec<u8> {
    // Spelled out without `..`: a new field must be written (and given a new form).
    let StatusRecord {
        generation,
        spec_hash,
        phase,
        observed_generation,
        last_reconcile_time,
        last_success_time,
        retry_count,
        next_attempt_time,
        last_error,
        status,
        conditions,
        plugin,
        plugin_version,
        history,
        source,
        deleting,
        api_version,
        spec,
        warnings,
        plugin_warnings_for,
    } = rec;
    let texts =
        [last_error, status, spec, plugin_warnings_for].iter().map(|t| t.as_deref().map_or(0, str::len)).sum::<usize>();
    let mut w = Writer::with_capacity(128 + texts + conditions.len() * 64 + history.len() * 48);
    w.byte(FORM_1);
    w.uint(*generation);
    w.fixed(*spec_hash);
    w.byte(phase_byte(*phase));
    w.opt_uint(*observed_generation);
    w.opt_uint(*last_reconcile_time);
    w.opt_uint(*last_success_time);
    w.uint(u64::from(*retry_count));
    w.opt_uint(*next_attempt_time);
    w.opt_text(last_error.as_deref());
    w.opt_text(status.as_deref());
    w.seq(conditions.iter(), |w, c| {
        w.text(&c.type_);
        w.byte(status_byte(c.status));
        w.text(&c.reason);
        w.text(&c.message);
    });
    w.opt_text(plugin.as_deref());
    w.opt_text(plugin_version.as_deref());
    w.seq(history.iter(), |w, h| {
        let HistoryEntry { time, reason, outcome, duration_ms, warnings, trace_id, count, first_time } = h;
        w.uint(*time);
        w.text(reason.as_str());
        w.text(outcome);
        w.uint(*duration_ms);
        w.seq(warnings.iter(), |w, s| w.text(s));
        w.opt_text(trace_id.as_deref());
        w.uint(u64::from(*count));
        w.opt_uint(*first_time);
    });
    w.opt(source.as_ref(), |w, s| {
        w.text(&s.file);
        w.uint(s.line);
    });
    w.flag(*deleting);
    w.text(api_version);
    w.opt_text(spec.as_deref());
    w.seq(warnings.iter(), |w, f| {
        w.text(&f.path);
        w.text(&f.message);
        w.byte(source_byte(f.source));
    });
    w.opt_text(plugin_warnings_for.as_deref());
    w.into_bytes()
}

fn decode(r: &mut Reader<'_>) -> Result<StatusRecord, BinaryError> {
    Ok(StatusRecord {
        generation: r.uint()?,
        spec_hash: r.fixed()?,
        phase: r.one_of(phase_of)?,
        observed_generation: r.opt_uint()?,
        last_reconcile_time: r.opt_uint()?,
        last_success_time: r.opt_uint()?,
        retry_count: r.uint32()?,
        next_attempt_time: r.opt_uint()?,
        last_error: r.opt(text)?,
        status: r.opt(text)?,
        conditions: seq(r, |r| {
            Ok(Condition { type_: text(r)?, status: r.one_of(status_of)?, reason: text(r)?, message: text(r)? })
        })?,
        plugin: r.opt(name)?,
        plugin_version: r.opt(name)?,
        history: VecDeque::from(seq(r, |r| {
            Ok(HistoryEntry {
                time: r.uint()?,
                reason: Reason::named(r.text()?),
                outcome: name(r)?,
                duration_ms: r.uint()?,
                warnings: seq(r, text)?,
                trace_id: r.opt(text)?,
                count: r.uint32()?,
                first_time: r.opt_uint()?,
            })
        })?),
        source: r.opt(|r| Ok(SourceLocation::new(r.text()?, r.uint()?)))?,
        deleting: r.flag()?,
        api_version: name(r)?,
        spec: r.opt(text)?,
        warnings: seq(r, |r| {
            Ok(FieldWarning { path: text(r)?, message: text(r)?, source: r.one_of(warning_source_of)? })
        })?,
        plugin_warnings_for: r.opt(text)?,
    })
}

fn text(r: &mut Reader<'_>) -> Result<String, BinaryError> {
    r.text().map(str::to_string)
}

/// Text that recurs in every record, read as its one shared copy.
fn name(r: &mut Reader<'_>) -> Result<Name, BinaryError> {
    r.text().map(Name::interned)
}

/// A sequence read at its exact length (see the record's lists read from JSON).
fn seq<T>(
    r: &mut Reader<'_>,
    mut take: impl FnMut(&mut Reader<'_>) -> Result<T, BinaryError>,
) -> Result<Vec<T>, BinaryError> {
    let n = r.seq_len()?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(take(r)?);
    }
    Ok(v)
}

fn phase_byte(p: Phase) -> u8 {
    match p {
        Phase::Pending => 0,
        Phase::Reconciling => 1,
        Phase::Synced => 2,
        Phase::Error => 3,
        Phase::Failed => 4,
    }
}

fn phase_of(b: u8) -> Option<Phase> {
    Phase::ALL.into_iter().find(|p| phase_byte(*p) == b)
}

fn status_byte(s: ConditionStatus) -> u8 {
    match s {
        ConditionStatus::True => 0,
        ConditionStatus::False => 1,
        ConditionStatus::Unknown => 2,
    }
}

fn status_of(b: u8) -> Option<ConditionStatus> {
    [ConditionStatus::True, ConditionStatus::False, ConditionStatus::Unknown].into_iter().find(|s| status_byte(*s) == b)
}

fn source_byte(s: WarningSource) -> u8 {
    match s {
        WarningSource::Schema => 0,
        WarningSource::Plugin => 1,
        WarningSource::Source => 2,
    }
}

fn warning_source_of(b: u8) -> Option<WarningSource> {
    [WarningSource::Schema, WarningSource::Plugin, WarningSource::Source].into_iter().find(|s| source_byte(*s) == b)
}

#[cfg(test)]
mod tests {
    use redb::{Database, ReadableDatabase, ReadableTable};

    use super::*;
    use crate::store::Store;
    use crate::store::writer::RECORDS;

    /// A record with every field set, every list holding more than one item, and values at the
    /// edges of their types.
    fn full() -> StatusRecord {
        let entry = |time, reason, outcome: &str| HistoryEntry {
            time,
            reason,
            outcome: Name::from(outcome),
            duration_ms: 12,
            warnings: Vec::new(),
            trace_id: None,
            count: 1,
            first_time: None,
        };
        StatusRecord {
            generation: u64::MAX,
            spec_hash: 0xdead_beef_0123_4567,
            phase: Phase::Failed,
            observed_generation: Some(0),
            last_reconcile_time: Some(1_764_400_000_000),
            last_success_time: Some(1),
            retry_count: u32::MAX,
            next_attempt_time: Some(1_764_400_005_000),
            last_error: Some("plugin trapped: \"unreachable\"\nat line 3 — ünïcode".into()),
            status: Some(r#"{"ready":true,"tools":["a","b"]}"#.into()),
            conditions: vec![
                Condition::new("Ready", true, "Started", "it runs"),
                Condition {
                    type_: "Probe".into(),
                    status: ConditionStatus::Unknown,
                    reason: String::new(),
                    message: "?".into(),
                },
            ],
            plugin: Some(Name::from("mcpserver")),
            plugin_version: Some(Name::from("1.2.3")),
            history: VecDeque::from(vec![
                HistoryEntry {
                    warnings: vec!["spec.x: unknown field, ignored".into(), String::new()],
                    trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
                    count: 7,
                    first_time: Some(1_764_399_000_000),
                    ..entry(1_764_399_999_000, Reason::Resync, "Synced")
                },
                entry(1_764_400_000_000, Reason::Unit("serviceChanged"), "Error: trap"),
                entry(2, Reason::Created, "Failed: invalid"),
            ]),
            source: Some(SourceLocation::new("servers/a:b.yaml", 42)),
            deleting: true,
            api_version: Name::from("steward.dev/v1"),
            spec: Some(r#"{"command":"npx","args":["-y"]}"#.into()),
            warnings: vec![
                FieldWarning {
                    path: "spec.x".into(),
                    message: "unknown field, ignored".into(),
                    source: WarningSource::Schema,
                },
                FieldWarning {
                    path: "metadata.name".into(),
                    message: "from the file".into(),
                    source: WarningSource::Source,
                },
                FieldWarning { path: "spec".into(), message: "deprecated".into(), source: WarningSource::Plugin },
            ],
            plugin_warnings_for: Some("1234/mcpserver@1.2.3".into()),
        }
    }

    #[test]
    fn every_field_reads_back_from_the_binary_form() {
        for rec in [full(), StatusRecord::default()] {
            let bytes = rec.encode(RecordForm::Binary).unwrap();
            assert_eq!(bytes[0], FORM_1);
            assert_eq!(StatusRecord::form_of(&bytes), RecordForm::Binary);
            assert_eq!(StatusRecord::decode(&bytes).unwrap(), rec);
        }
        // Every phase and condition status, each alone.
        for phase in Phase::ALL {
            let rec = StatusRecord { phase, ..StatusRecord::default() };
            assert_eq!(StatusRecord::decode(&rec.encode(RecordForm::Binary).unwrap()).unwrap().phase, phase);
        }
    }

    #[test]
    fn the_binary_form_is_smaller_than_the_json() {
        let rec = full();
        let binary = rec.encode(RecordForm::Binary).unwrap().len();
        let json = rec.encode(RecordForm::Json).unwrap().len();
        assert!(binary * 3 < json * 2, "binary {binary} bytes against JSON {json}");
    }

    #[test]
    fn json_of_earlier_versions_still_reads() {
        let rec = full();
        let json = serde_json::to_vec(&rec).unwrap();
        assert_eq!(StatusRecord::form_of(&json), RecordForm::Json);
        assert_eq!(StatusRecord::decode(&json).unwrap(), rec);
        // Written with the JSON form, it is what an earlier version reads.
        assert_eq!(rec.encode(RecordForm::Json).unwrap(), json);
        // White space before the JSON is JSON, not a form.
        let spaced = [b"\n ".as_slice(), &json].concat();
        assert_eq!(StatusRecord::form_of(&spaced), RecordForm::Json);
        assert_eq!(StatusRecord::decode(&spaced).unwrap(), rec);
    }

    #[test]
    fn damaged_or_newer_records_are_errors_not_panics() {
        let bytes = full().encode(RecordForm::Binary).unwrap();
        for cut in 1..bytes.len() {
            let e = StatusRecord::decode(&bytes[..cut]).unwrap_err();
            assert!(matches!(e, DecodeError::Binary(_)), "cut at {cut}: {e}");
        }
        let longer = [bytes.as_slice(), &[0]].concat();
        assert_eq!(
            StatusRecord::decode(&longer).unwrap_err().to_string(),
            format!("binary record: bytes left after the record at byte {}", bytes.len())
        );
        let mut bad_phase = StatusRecord::default().encode(RecordForm::Binary).unwrap();
        // Form, generation (one byte), spec hash (eight), then the phase.
        bad_phase[10] = 9;
        assert_eq!(
            StatusRecord::decode(&bad_phase).unwrap_err().to_string(),
            "binary record: unknown value of an enumeration at byte 10"
        );
        let newer = [&[2u8][..], &bytes[1..]].concat();
        let e = StatusRecord::decode(&newer).unwrap_err();
        assert!(matches!(e, DecodeError::UnknownForm(2)) && e.to_string().contains("newer Steward"), "{e}");
        // Every byte flipped in turn: an error or some record, never a panic.
        for i in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0xff;
            let _ = StatusRecord::decode(&flipped);
        }
    }

    #[test]
    fn names_that_recur_in_every_record_are_read_as_one_copy() {
        let (a, b) = (full().encode(RecordForm::Binary).unwrap(), full().encode(RecordForm::Binary).unwrap());
        let (a, b) = (StatusRecord::decode(&a).unwrap(), StatusRecord::decode(&b).unwrap());
        let same = |x: &Name, y: &Name| std::ptr::eq(x.as_str(), y.as_str());
        assert!(same(a.plugin.as_ref().unwrap(), b.plugin.as_ref().unwrap()));
        assert!(same(a.plugin_version.as_ref().unwrap(), b.plugin_version.as_ref().unwrap()));
        assert!(same(&a.api_version, &b.api_version));
        assert!(same(&a.history[0].outcome, &b.history[0].outcome));
    }

    /// The raw bytes of every record in the store file at `path` (the store closed).
    fn raw(path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
        let db = Database::open(path).unwrap();
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(RECORDS).unwrap();
        table.iter().unwrap().map(|e| e.unwrap()).map(|(k, v)| (k.value().to_string(), v.value().to_vec())).collect()
    }

    #[tokio::test]
    async fn a_store_told_json_writes_every_record_as_json_for_an_earlier_host() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let mut other = full();
        other.generation = 2;

        // Written by this version: binary.
        let store = Store::<StatusRecord>::open(&path).unwrap();
        store.put("MCPServer/default/a".into(), full()).await.unwrap();
        store.put("MCPServer/default/b".into(), other.clone()).await.unwrap();
        store.close().unwrap();
        assert!(raw(&path).iter().all(|(_, v)| v[0] == FORM_1));

        // One start told JSON writes them all again, before anything else, and loses nothing.
        let store = Store::<StatusRecord>::open_as(&path, RecordForm::Json).unwrap();
        assert_eq!(store.get("MCPServer/default/a"), Some(full()));
        store.close().unwrap();
        let records = raw(&path);
        assert_eq!(records.len(), 2);
        for ((_, bytes), want) in records.iter().zip([full(), other.clone()]) {
            // What an earlier version does with a record: serde_json, nothing else.
            assert_eq!(serde_json::from_slice::<StatusRecord>(bytes).unwrap(), want);
        }

        // Opened by this version again, the JSON reads, and the next write is binary.
        let store = Store::<StatusRecord>::open(&path).unwrap();
        assert_eq!(store.skipped_on_open(), 0);
        assert_eq!(
            store.all(),
            vec![("MCPServer/default/a".to_string(), full()), ("MCPServer/default/b".to_string(), other)]
        );
        store.put("MCPServer/default/a".into(), full()).await.unwrap();
        store.close().unwrap();
        let forms: Vec<u8> = raw(&path).iter().map(|(_, v)| v[0]).collect();
        assert_eq!(forms, [FORM_1, b'{']);
    }
}

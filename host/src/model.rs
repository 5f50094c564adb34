//! The host's data model: object keys, reconcile phases and reasons, and the persisted status record.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use steward_sdk::Condition;

/// How many past reconciles a status record keeps.
pub const HISTORY_LEN: usize = 10;

/// One part of an [`ObjectKey`]: immutable text whose clones share one allocation, so that a
/// key held in several places (the source, the queue, the resync schedule, the store's
/// indexes) costs its text once. Compares, hashes and orders as its text.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(Arc<str>);

impl Name {
    /// The one shared copy of `text` among the names made by this function: for the few texts
    /// that recur in every record (plugin names and versions, apiVersions, outcomes). Never
    /// for texts without bound (object names, file paths): each is kept for good.
    pub fn interned(text: &str) -> Self {
        static NAMES: std::sync::Mutex<std::collections::BTreeSet<Name>> =
            std::sync::Mutex::new(std::collections::BTreeSet::new());
        let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = names.get(text) {
            return n.clone();
        }
        let n = Name::from(text);
        names.insert(n.clone());
        n
    }

    /// [`Self::interned`] for the fixed words the host writes on most reconciles (`Synced`,
    /// the event types and actions), without the interning's lock: they are made once. Any
    /// other word is interned as usual.
    pub fn word(word: &'static str) -> Self {
        static WORDS: std::sync::LazyLock<[Name; 5]> =
            std::sync::LazyLock::new(|| ["Synced", "Normal", "Warning", "Reconcile", "Finalize"].map(Name::interned));
        WORDS.iter().find(|w| w.as_str() == word).cloned().unwrap_or_else(|| Self::interned(word))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Self {
        Self(Arc::from(s))
    }
}

impl From<String> for Name {
    fn from(s: String) -> Self {
        Self(Arc::from(s))
    }
}

impl From<&String> for Name {
    fn from(s: &String) -> Self {
        Self(Arc::from(s.as_str()))
    }
}

impl From<&Name> for Name {
    fn from(s: &Name) -> Self {
        s.clone()
    }
}

impl From<&Name> for String {
    fn from(n: &Name) -> Self {
        n.0.to_string()
    }
}

impl From<Name> for serde_json::Value {
    fn from(n: Name) -> Self {
        serde_json::Value::String(n.0.to_string())
    }
}

impl From<Name> for String {
    fn from(n: Name) -> Self {
        n.0.to_string()
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, other: &Name) -> bool {
        *self == *other.0
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        **self == *other.0
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        **self == *other.0
    }
}

impl Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::from)
    }
}

/// Identifies one object: kind, namespace and name. Displays as `Kind/namespace/name`; compares
/// and orders by kind, then namespace, then name. One pointer wide: a clone shares the parts of
/// the original (one reference count, no allocation), so a key held in several places (the
/// source, its index, the queue, the resync schedule) costs its parts once.
///
/// It hashes as one number computed when the key is made: the parts hashed with a seed this
/// process chose at random (as a `HashMap`'s own is), so that the host's maps and sets, which
/// hash a key a few dozen times per reconcile, hash its text once, and names crafted to collide
/// cannot be made without knowing the seed. Equal keys made apart hash alike in one process;
/// the number means nothing across processes.
#[derive(Clone)]
pub struct ObjectKey(Arc<Keyed>);

/// The parts of an [`ObjectKey`] with their hash.
struct Keyed {
    parts: KeyParts,
    hash: u64,
}

/// The parts of an [`ObjectKey`], in the order it compares them.
#[derive(Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
struct KeyParts {
    kind: Name,
    namespace: Name,
    name: Name,
}

impl PartialOrd for KeyParts {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KeyParts {
    /// By kind, namespace, then name, as their text; a part that shares its allocation with the
    /// other's (the kinds and namespaces of a file's objects do) is equal without reading it.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let part = |a: &Name, b: &Name| if Arc::ptr_eq(&a.0, &b.0) { std::cmp::Ordering::Equal } else { a.cmp(b) };
        part(&self.kind, &other.kind)
            .then_with(|| part(&self.namespace, &other.namespace))
            .then_with(|| part(&self.name, &other.name))
    }
}

impl ObjectKey {
    /// The key of `kind` `namespace/name`.
    pub fn new(kind: impl Into<Name>, namespace: impl Into<Name>, name: impl Into<Name>) -> Self {
        Self::of(KeyParts { kind: kind.into(), namespace: namespace.into(), name: name.into() })
    }

    fn of(parts: KeyParts) -> Self {
        static SEED: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
        let hash = std::hash::BuildHasher::hash_one(SEED.get_or_init(std::hash::RandomState::new), &parts);
        Self(Arc::new(Keyed { parts, hash }))
    }

    /// The kind, for example `MCPServer`.
    pub fn kind(&self) -> &Name {
        &self.0.parts.kind
    }

    /// The namespace (`default` when the source gave none; empty for a cluster-scoped object).
    pub fn namespace(&self) -> &Name {
        &self.0.parts.namespace
    }

    /// `metadata.name`.
    pub fn name(&self) -> &Name {
        &self.0.parts.name
    }

    /// Parses `Kind/namespace/name` (`Kind//name` for a cluster-scoped object); `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split('/');
        let (kind, ns, name) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || kind.is_empty() || name.is_empty() {
            return None;
        }
        Some(Self::new(kind, ns, name))
    }
}

impl PartialEq for ObjectKey {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || (self.0.hash == other.0.hash && self.0.parts == other.0.parts)
    }
}

impl Eq for ObjectKey {}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) { std::cmp::Ordering::Equal } else { self.0.parts.cmp(&other.0.parts) }
    }
}

impl std::hash::Hash for ObjectKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash);
    }
}

/// The hasher of the host's maps and sets of [`ObjectKey`]s ([`KeyMap`], [`KeySet`]): a key
/// arrives hashed already (with the process's random seed), so it is taken with one multiply
/// rather than hashed again with SipHash. Any other key is mixed word by word the same way,
/// which is fast but not proof against crafted collisions: use it for `ObjectKey`s only.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHasher(u64);

impl KeyHasher {
    /// Odd, so that mixing a word in is a bijection (FxHash's constant).
    const K: u64 = 0x517c_c1b7_2722_0a95;

    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::K);
    }
}

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.mix(u64::from_le_bytes(tail) ^ ((bytes.len() as u64) << 56));
    }

    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Builds [`KeyHasher`]s.
pub type KeyHash = std::hash::BuildHasherDefault<KeyHasher>;

/// A map by [`ObjectKey`] hashed with [`KeyHasher`]; make one with `KeyMap::default()`.
pub type KeyMap<V> = std::collections::HashMap<ObjectKey, V, KeyHash>;

/// A set of [`ObjectKey`]s hashed with [`KeyHasher`]; make one with `KeySet::default()`.
pub type KeySet = std::collections::HashSet<ObjectKey, KeyHash>;

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectKey")
            .field("kind", &self.0.parts.kind)
            .field("namespace", &self.0.parts.namespace)
            .field("name", &self.0.parts.name)
            .finish()
    }
}

/// Written as `{"kind", "namespace", "name"}`, as it always was.
impl Serialize for ObjectKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.parts.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ObjectKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        KeyParts::deserialize(d).map(Self::of)
    }
}

impl ObjectKey {
    /// The key as text, `kind/namespace/name` (what `Display` writes), made in one allocation of
    /// its exact size: `to_string` grows its buffer two or three times for a key, and the engine
    /// makes the text of a key several times per reconcile (the store's records are keyed by it).
    pub fn text(&self) -> String {
        let KeyParts { kind, namespace, name } = &self.0.parts;
        let mut s = String::with_capacity(kind.len() + namespace.len() + name.len() + 2);
        s.push_str(kind);
        s.push('/');
        s.push_str(namespace);
        s.push('/');
        s.push_str(name);
        s
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Piece by piece rather than `write!`: a key is formatted several times per reconcile.
        let KeyParts { kind, namespace, name } = &self.0.parts;
        f.write_str(kind)?;
        f.write_str("/")?;
        f.write_str(namespace)?;
        f.write_str("/")?;
        f.write_str(name)
    }
}

/// Where an object stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Phase {
    /// Known, not yet reconciled.
    #[default]
    Pending,
    /// A reconcile is running.
    Reconciling,
    /// The last reconcile succeeded for the current generation.
    Synced,
    /// The last reconcile failed; it will be retried with backoff.
    Error,
    /// Retries are exhausted or the error is permanent; waits for a spec change or a manual trigger.
    Failed,
}

impl Phase {
    /// Every phase, in display order.
    pub const ALL: [Phase; 5] = [Phase::Pending, Phase::Reconciling, Phase::Synced, Phase::Error, Phase::Failed];
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Why a reconcile ran.
///
/// It is kept in each object's history as its camel-case name (`specChanged`); a reason a
/// capability unit causes is data, [`Reason::Unit`], kept as the name the unit gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The object appeared.
    Created,
    /// Its spec (or labels or annotations) changed.
    SpecChanged,
    /// Something it read through `get`/`list` changed.
    DependencyChanged,
    /// Its resync interval passed.
    Resync,
    /// A retry after an error.
    Retry,
    /// Someone asked for it through the API or CLI.
    ManualTrigger,
    /// Its plugin was loaded, replaced, or unblocked.
    PluginReloaded,
    /// The plugin asked to be called again (`requeue-after`).
    Requeue,
    /// The object is gone from its source: finalize.
    Deleted,
    /// Its kind was enabled.
    KindEnabled,
    /// Its kind was disabled (Kubernetes mode: its status says so).
    KindDisabled,
    /// The host started and the object was not converged, or it owns something to start again.
    Startup,
    /// Something it owns through a capability changed (a service, a tool call, a child object);
    /// the unit names what, in camel case (`serviceChanged`).
    Unit(&'static str),
    /// This replica took the lease over (Kubernetes mode): the cluster, not its own store, says
    /// where each object stands, so every object runs again.
    LeaderElected,
    /// The world round of its plugin decided its status (the plugin reconciles a world).
    World,
}

/// The reasons the host itself has, by the name they are kept under.
const REASONS: &[(Reason, &str)] = &[
    (Reason::Created, "created"),
    (Reason::SpecChanged, "specChanged"),
    (Reason::DependencyChanged, "dependencyChanged"),
    (Reason::Resync, "resync"),
    (Reason::Retry, "retry"),
    (Reason::ManualTrigger, "manualTrigger"),
    (Reason::PluginReloaded, "pluginReloaded"),
    (Reason::Requeue, "requeue"),
    (Reason::Deleted, "deleted"),
    (Reason::KindEnabled, "kindEnabled"),
    (Reason::KindDisabled, "kindDisabled"),
    (Reason::Startup, "startup"),
    (Reason::LeaderElected, "leaderElected"),
    (Reason::World, "worldRound"),
];

impl Reason {
    /// The name it is kept and shown under.
    pub fn as_str(&self) -> &'static str {
        match self {
            Reason::Unit(name) => name,
            other => REASONS.iter().find(|(r, _)| r == other).map_or("", |(_, n)| n),
        }
    }

    /// The reason named `name`; a name the host does not have is a unit's.
    pub fn named(name: &str) -> Self {
        match REASONS.iter().find(|(_, n)| *n == name) {
            Some((r, _)) => *r,
            None => Reason::Unit(unit_reason(name)),
        }
    }
}

/// `name` as a unit's reason read back from the store: each distinct name is kept once for
/// the process (units name a handful).
fn unit_reason(name: &str) -> &'static str {
    static SEEN: std::sync::Mutex<BTreeSet<&'static str>> = std::sync::Mutex::new(BTreeSet::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = seen.get(name) {
        return n;
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    seen.insert(leaked);
    leaked
}

impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(d)?;
        Ok(Reason::named(&name))
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// Now, in milliseconds since the Unix epoch.
pub fn now_millis() -> Millis {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// RFC 3339 with milliseconds, UTC.
pub fn rfc3339(ms: Millis) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// One past reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// When it started.
    pub time: Millis,
    /// Why it ran.
    pub reason: Reason,
    /// `Synced`, `Error: …`, `Failed: …`, `Finalized`.
    pub outcome: Name,
    /// How long it took.
    pub duration_ms: u64,
    /// The object's warnings when it ran (`path: message`), left out when there were none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The OpenTelemetry trace id (32 hex digits) of the reconcile, when traces were exported.
    /// Absent from records written before traces existed, and left out when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// How many reconciles in a row the entry stands for: one that ran for the same reason,
    /// with the same outcome and warnings as the entry before it, is counted into that entry
    /// (which then keeps the newest time, duration and trace id). Left out when one.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u32,
    /// When the first of the reconciles counted in [`Self::count`] started; left out when the
    /// entry stands for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_time: Option<Millis>,
}

impl HistoryEntry {
    /// Whether `next` says nothing new after `self`: the same reason, outcome and warnings.
    pub fn repeated_by(&self, next: &HistoryEntry) -> bool {
        self.reason == next.reason && self.outcome == next.outcome && self.warnings == next.warnings
    }

    /// Counts `next`, a repeat of `self` ([`Self::repeated_by`]), into `self`: its time,
    /// duration and trace id become the entry's; the first time stays.
    fn count_in(&mut self, next: HistoryEntry) {
        self.first_time = self.first_time.or(Some(self.time));
        self.count = self.count.saturating_add(next.count);
        self.time = next.time;
        self.duration_ms = next.duration_ms;
        self.trace_id = next.trace_id;
    }
}

/// A [`HistoryEntry::count`] read without one (serde's default).
pub(crate) fn one() -> u32 {
    1
}

/// Whether a count is one, which is left out when written.
pub(crate) fn is_one(n: &u32) -> bool {
    *n == 1
}

/// Where a [`FieldWarning`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WarningSource {
    /// The host: a field the kind's schema does not know, dropped (`field_validation: warn`).
    Schema,
    /// The plugin's own judgement (`Kind::warnings`, the optional `lint` export).
    Plugin,
    /// The filesystem source: what it accepts, as muster does, that Kubernetes mode refuses
    /// (a name taken from the file, `_` in a name, an unknown key).
    Source,
}

/// A problem with one field of a spec that does not stop the object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FieldWarning {
    /// Path of the field from the object root, for example `spec.steps[0].input_schema`.
    pub path: String,
    /// What is wrong, for example `unknown field, ignored`.
    pub message: String,
    /// Who says so.
    pub source: WarningSource,
}

impl std::fmt::Display for FieldWarning {
    /// `path: message`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Everything the host persists about one object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRecord {
    /// The object's current generation (bumped when its spec changes).
    pub generation: u64,
    /// Hash of the spec that generation has.
    pub spec_hash: u64,
    /// Where it stands.
    pub phase: Phase,
    /// The generation the last successful reconcile saw.
    pub observed_generation: Option<u64>,
    /// When the last reconcile started.
    pub last_reconcile_time: Option<Millis>,
    /// When the last successful reconcile finished.
    pub last_success_time: Option<Millis>,
    /// Failed attempts since the last success.
    pub retry_count: u32,
    /// When the next attempt is scheduled.
    pub next_attempt_time: Option<Millis>,
    /// The last error, sanitized (no host paths, no credentials).
    pub last_error: Option<String>,
    /// The plugin's own status: a JSON object kept as its compact text (an object per record
    /// costs several times its text in memory). Stored as a JSON string; records written when
    /// it was stored as an object still read. [`Self::status_value`] parses it.
    #[serde(default, with = "status_text")]
    pub status: Option<String>,
    /// Conditions the plugin reported.
    #[serde(deserialize_with = "exact::vec")]
    pub conditions: Vec<Condition>,
    /// The plugin that reconciled it.
    pub plugin: Option<Name>,
    /// That plugin's version.
    pub plugin_version: Option<Name>,
    /// The last [`HISTORY_LEN`] reconciles, newest last.
    #[serde(deserialize_with = "exact::deque")]
    pub history: VecDeque<HistoryEntry>,
    /// Where it was last read from (stored as `file:line`, as earlier versions wrote it).
    pub source: Option<SourceLocation>,
    /// True while the object is gone from its source and awaits (or failed) finalize.
    pub deleting: bool,
    /// The last `apiVersion` seen, so a deleted object can still be finalized.
    #[serde(default)]
    pub api_version: Name,
    /// The last spec seen (JSON text), so a deleted object can still be finalized with it.
    #[serde(default)]
    pub spec: Option<String>,
    /// Problems with the spec that do not stop the object: fields its kind's schema does not
    /// know (dropped) and the plugin's own warnings. Empty when the spec has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<FieldWarning>,
    /// What the plugin's warnings in [`Self::warnings`] were asked for (`specHash/plugin@version`),
    /// so that they are asked again only when the spec or the plugin changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_warnings_for: Option<String>,
}

impl StatusRecord {
    /// Whether `self` and `other` say the same about the object and differ at most in when
    /// things happened: the times of the last reconcile, success and next attempt, and the
    /// history of reconciles (a resync of an unchanged object changes only these).
    pub fn same_but_times(&self, other: &Self) -> bool {
        // Spelled out without `..`: a new field must be placed on one side or the other.
        let Self {
            generation,
            spec_hash,
            phase,
            observed_generation,
            last_reconcile_time: _,
            last_success_time: _,
            retry_count,
            next_attempt_time: _,
            last_error,
            status,
            conditions,
            plugin,
            plugin_version,
            history: _,
            source,
            deleting,
            api_version,
            spec,
            warnings,
            plugin_warnings_for,
        } = self;
        *generation == other.generation
            && *spec_hash == other.spec_hash
            && *phase == other.phase
            && *observed_generation == other.observed_generation
            && *retry_count == other.retry_count
            && *last_error == other.last_error
            && *status == other.status
            && *conditions == other.conditions
            && *plugin == other.plugin
            && *plugin_version == other.plugin_version
            && *source == other.source
            && *deleting == other.deleting
            && *api_version == other.api_version
            && *spec == other.spec
            && *warnings == other.warnings
            && *plugin_warnings_for == other.plugin_warnings_for
    }

    /// The plugin's status parsed, if there is one and it is JSON.
    pub fn status_value(&self) -> Option<serde_json::Value> {
        self.status.as_deref().and_then(|s| serde_json::from_str(s).ok())
    }

    /// Appends to the history, keeping the last [`HISTORY_LEN`] entries; a repeat of the last
    /// entry (the same reason, outcome and warnings: a resync of an object at rest, a retry
    /// failing the same way) is counted into it rather than appended, so that what an object
    /// went through stays in view and its record does not grow with every resync.
    pub fn push_history(&mut self, e: HistoryEntry) {
        if let Some(last) = self.history.back_mut()
            && last.repeated_by(&e)
        {
            last.count_in(e);
            return;
        }
        while self.history.len() >= HISTORY_LEN {
            self.history.pop_front();
        }
        // Most objects keep one or two entries for good: grow one at a time, never past
        // HISTORY_LEN (doubling would leave room for sixteen).
        if self.history.len() == self.history.capacity() {
            self.history.reserve_exact(1);
        }
        self.history.push_back(e);
    }
}

/// Lists read at their exact length: serde grows a list read from JSON (which gives no length
/// ahead) to room for four, which for a record's one condition and one history entry is about
/// 600 bytes a record, 600 MB over a million records loaded at start.
mod exact {
    use std::collections::VecDeque;

    use serde::{Deserialize, Deserializer};

    pub fn vec<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
        let mut v = Vec::<T>::deserialize(d)?;
        v.shrink_to_fit();
        Ok(v)
    }

    pub fn deque<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<VecDeque<T>, D::Error> {
        vec(d).map(VecDeque::from)
    }
}

/// The record's `status`: written as a JSON string holding the object's text; read from that
/// or from an object (records written before the status was kept as text).
mod status_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        Ok(match Option::<serde_json::Value>::deserialize(d)? {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(text)) => Some(text),
            Some(other) => Some(other.to_string()),
        })
    }
}

/// Whether `s` is a DNS-1123 label: lower-case alphanumerics and `-`, alphanumeric at both ends, at most 63.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a DNS-1123 subdomain: at most 253 characters, dot-separated DNS-1123 labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Whether `s` is a name filesystem mode accepts for an object: a DNS-1123 subdomain
/// ([`is_dns_subdomain`]), except that its labels may also hold `_` inside (muster's
/// `special-chars-workflow_123`). Kubernetes mode accepts DNS-1123 subdomains only.
pub fn is_object_name(s: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            && l.starts_with(|c: char| c.is_ascii_alphanumeric())
            && l.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    s.len() <= 253 && s.split('.').all(label)
}

/// Whether `s` is a kind: an ASCII upper-case letter, then ASCII letters and digits; at most 63.
pub fn is_kind(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len()) && b[0].is_ascii_uppercase() && b.iter().all(u8::is_ascii_alphanumeric)
}

/// The namespace of a namespaced object whose source names none.
/// The kind of one run of a Workflow (the `workflowrun` plugin's), which the host creates
/// itself: for each `workflow_<name>` tool call, `steward workflow run` and the API.
pub const WORKFLOW_RUN_KIND: &str = "WorkflowRun";

/// The kinds whose objects the host creates and deletes itself; the only ones the API creates.
pub const HOST_CREATED_KINDS: &[&str] = &[WORKFLOW_RUN_KIND];

pub const DEFAULT_NAMESPACE: &str = "default";

/// The namespace rule, one place for every source and every plugin read: a namespaced kind's
/// object without a namespace lives in [`DEFAULT_NAMESPACE`]; a cluster-scoped kind's object
/// has the empty namespace, whatever was given.
pub fn namespace_for(namespaced: bool, given: &str) -> &str {
    match (namespaced, given.is_empty()) {
        (false, _) => "",
        (true, true) => DEFAULT_NAMESPACE,
        (true, false) => given,
    }
}

/// The stable hash of a spec's canonical JSON text (FNV-1a, 64 bits): equal specs hash equal
/// across runs, hosts and modes, so a stored hash tells whether the spec changed while down.
pub fn spec_hash(canonical_spec: &str) -> u64 {
    fnv1a(canonical_spec.as_bytes())
}

/// FNV-1a, 64 bits, of any bytes: stable across platforms and Rust versions. The spec hash is
/// this of the canonical JSON text; the filesystem source also uses it to tell a file's bytes apart.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Where an object is defined. In filesystem mode: the file, relative to the resources directory
/// and `/`-separated, and the 1-based line where its document starts. In Kubernetes mode: the
/// object's API path, and line 0.
///
/// Displays, and is stored, as `file:line`: records written before this type existed hold that
/// text and still load, and a record written now reads the same to an older host.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceLocation {
    /// The file (or, in Kubernetes mode, the API path).
    pub file: Name,
    /// The 1-based line where the document starts; 0 when there is none.
    pub line: u64,
}

impl SourceLocation {
    /// The location `file:line`.
    pub fn new(file: impl Into<Name>, line: u64) -> Self {
        Self { file: file.into(), line }
    }

    /// Reads the `file:line` text this type displays as. Text without a `:line` suffix (a number
    /// after the last `:`) is taken whole as the file, at line 0; this never fails.
    pub fn parse(text: &str) -> Self {
        match text.rsplit_once(':') {
            Some((file, line)) if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) => match line.parse() {
                Ok(line) => Self::new(file, line),
                Err(_) => Self::new(text, 0),
            },
            _ => Self::new(text, 0),
        }
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

impl Serialize for SourceLocation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SourceLocation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Self::parse(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_made_apart_are_one_key_hash_alike_and_order_by_kind_namespace_name() {
        use std::hash::BuildHasher;
        let hasher = std::hash::RandomState::new();
        let a = ObjectKey::new("MCPServer", "default", "a");
        let parsed = ObjectKey::parse("MCPServer/default/a").unwrap();
        let read: ObjectKey = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        for same in [&parsed, &read] {
            assert_eq!(same, &a);
            assert_eq!(hasher.hash_one(same), hasher.hash_one(&a));
        }
        let b = ObjectKey::new("MCPServer", "default", "b");
        assert_ne!(a, b);
        // Parts that join to the same text are still other keys.
        assert_ne!(ObjectKey::new("ab", "c", "d"), ObjectKey::new("a", "bc", "d"));
        let set: std::collections::HashSet<ObjectKey> = [a.clone(), parsed, read, b.clone()].into_iter().collect();
        assert_eq!(set.len(), 2);
        let mut keys = [ObjectKey::new("W", "a", "z"), b, a, ObjectKey::new("MCPServer", "", "z")];
        keys.sort();
        let keys: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(keys, ["MCPServer//z", "MCPServer/default/a", "MCPServer/default/b", "W/a/z"]);
    }

    #[test]
    fn keys_sharing_their_parts_order_as_their_text_does() {
        // The source shares a file's kind and namespace among its objects; such keys must order
        // exactly as keys made apart do, or a range over a kind would miss objects.
        let (kind, ns) = (Name::from("MCPServer"), Name::from("default"));
        let mut shared: Vec<ObjectKey> =
            ["b", "a", "c"].iter().map(|n| ObjectKey::new(kind.clone(), ns.clone(), *n)).collect();
        shared.extend([ObjectKey::new("MCPServer", "default", "ab"), ObjectKey::new("MCPServer", "a", "z")]);
        shared.extend([ObjectKey::new(kind.clone(), "zz", "a"), ObjectKey::new("Workflow", ns.clone(), "a")]);
        let mut by_text = shared.clone();
        by_text.sort_by(|a, b| {
            (a.kind().as_str(), a.namespace().as_str(), a.name().as_str()).cmp(&(
                b.kind().as_str(),
                b.namespace().as_str(),
                b.name().as_str(),
            ))
        });
        shared.sort();
        assert_eq!(shared, by_text);
        let texts: Vec<String> = shared.iter().map(ToString::to_string).collect();
        assert_eq!(texts[0], "MCPServer/a/z");
        assert_eq!(texts[6], "Workflow/default/a");
    }

    #[test]
    fn a_key_map_finds_keys_made_apart_and_spreads_distinct_keys() {
        use std::hash::BuildHasher;
        let mut map = KeyMap::default();
        for i in 0..1000 {
            map.insert(ObjectKey::new("MCPServer", "default", format!("s{i}")), i);
        }
        assert_eq!(map.get(&ObjectKey::parse("MCPServer/default/s7").unwrap()), Some(&7));
        assert_eq!(map.get(&ObjectKey::new("MCPServer", "default", "s1000")), None);
        // Distinct keys give distinct hashes (a collision among 1,000 random 64-bit numbers
        // is all but impossible), both in the bits the table indexes by and in the whole.
        let hashes: std::collections::BTreeSet<u64> = map.keys().map(|k| KeyHash::default().hash_one(k)).collect();
        assert_eq!(hashes.len(), 1000);
        let low: std::collections::BTreeSet<u64> = hashes.iter().map(|h| h & 0xfff).collect();
        assert!(low.len() > 700, "the low bits spread the keys: {} of 1000 distinct", low.len());
        // Another key type still hashes by its whole content.
        let (a, b) = (KeyHash::default().hash_one("abcdefgh-1"), KeyHash::default().hash_one("abcdefgh-2"));
        assert_ne!(a, b);
    }

    #[test]
    fn a_keys_text_is_what_it_displays_and_parses_back_to_the_key() {
        for key in [ObjectKey::new("MCPServer", "default", "a"), ObjectKey::new("Shared", "", "cluster-wide")] {
            let text = key.text();
            assert_eq!(text, key.to_string());
            assert_eq!(text.capacity(), text.len(), "one allocation of its exact size");
            assert_eq!(ObjectKey::parse(&text).unwrap(), key);
        }
    }

    #[test]
    fn a_record_differing_only_in_its_times_and_history_is_the_same_but_times() {
        let before = StatusRecord {
            phase: Phase::Synced,
            observed_generation: Some(1),
            last_success_time: Some(10),
            status: Some("{}".into()),
            ..StatusRecord::default()
        };
        let mut resynced = before.clone();
        resynced.last_reconcile_time = Some(20);
        resynced.last_success_time = Some(21);
        resynced.next_attempt_time = Some(30);
        resynced.history.push_back(entry(20, Reason::Resync, "Synced"));
        assert!(resynced.same_but_times(&before));
        let mut changed = resynced.clone();
        changed.status = Some(r#"{"ready":false}"#.into());
        assert!(!changed.same_but_times(&before), "a new status is more than time");
        let mut failed = resynced;
        failed.phase = Phase::Error;
        failed.retry_count = 1;
        assert!(!failed.same_but_times(&before));
    }

    #[test]
    fn keys_round_trip_through_text() {
        let k = ObjectKey::new("MCPServer", "default", "git");
        assert_eq!(k.to_string(), "MCPServer/default/git");
        assert_eq!(ObjectKey::parse("MCPServer/default/git"), Some(k));
        assert_eq!(ObjectKey::parse("MCPServer/git"), None);
        assert_eq!(ObjectKey::parse("a/b/c/d"), None);
        // A cluster-scoped object (Kubernetes mode) has no namespace.
        assert_eq!(ObjectKey::parse("Kind//c"), Some(ObjectKey::new("Kind", "", "c")));
        assert_eq!(ObjectKey::parse("//c"), None);
        assert_eq!(ObjectKey::parse("a/b/"), None);
    }

    #[test]
    fn a_key_is_stored_as_its_three_parts_and_orders_by_kind_then_namespace_then_name() {
        let k = ObjectKey::new("MCPServer", "tools", "git");
        // The form records and API answers have always had.
        let stored = serde_json::to_value(&k).unwrap();
        assert_eq!(stored, serde_json::json!({"kind": "MCPServer", "namespace": "tools", "name": "git"}));
        assert_eq!(serde_json::from_value::<ObjectKey>(stored).unwrap(), k);
        assert_eq!((k.kind().as_str(), k.namespace().as_str(), k.name().as_str()), ("MCPServer", "tools", "git"));
        let mut keys = [
            ObjectKey::new("Workflow", "a", "a"),
            ObjectKey::new("MCPServer", "b", "a"),
            ObjectKey::new("MCPServer", "a", "b"),
            ObjectKey::new("MCPServer", "a", "a"),
        ];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["MCPServer/a/a", "MCPServer/a/b", "MCPServer/b/a", "Workflow/a/a"]);
        // A clone is the same key; an equal key made apart is equal too.
        assert_eq!(k.clone(), ObjectKey::new("MCPServer", "tools", "git"));
        assert_ne!(k, ObjectKey::new("MCPServer", "tools", "gi"));
    }

    #[test]
    fn a_status_is_kept_as_text_and_records_that_stored_it_as_an_object_still_read() {
        let rec = StatusRecord { status: Some(r#"{"ready":true,"n":[1,2]}"#.into()), ..Default::default() };
        let stored = serde_json::to_value(&rec).unwrap();
        assert_eq!(stored["status"], serde_json::json!(r#"{"ready":true,"n":[1,2]}"#));
        let back: StatusRecord = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(back, rec);
        // Written by an earlier version: the status as an object.
        let mut old = stored;
        old["status"] = serde_json::json!({"ready": true, "n": [1, 2]});
        let back: StatusRecord = serde_json::from_value(old).unwrap();
        assert_eq!(back.status_value(), Some(serde_json::json!({"ready": true, "n": [1, 2]})));
        // No status at all.
        let mut none = serde_json::to_value(StatusRecord::default()).unwrap();
        assert_eq!(none["status"], serde_json::Value::Null);
        none.as_object_mut().unwrap().remove("status");
        assert_eq!(serde_json::from_value::<StatusRecord>(none).unwrap().status, None);
    }

    #[test]
    fn records_without_warnings_read_and_write_as_before() {
        let old = serde_json::json!({"generation": 1, "specHash": 2, "phase": "Synced", "observedGeneration": 1,
            "lastReconcileTime": null, "lastSuccessTime": null, "retryCount": 0, "nextAttemptTime": null,
            "lastError": null, "status": null, "conditions": [], "plugin": null, "pluginVersion": null,
            "history": [{"time": 1, "reason": "created", "outcome": "Synced", "durationMs": 1}],
            "source": "a.yaml:1", "deleting": false});
        let r: StatusRecord = serde_json::from_value(old).unwrap();
        assert!(r.warnings.is_empty() && r.plugin_warnings_for.is_none() && r.history[0].warnings.is_empty());
        let written = serde_json::to_value(&r).unwrap();
        assert!(written.get("warnings").is_none() && written.get("pluginWarningsFor").is_none());
        assert!(written["history"][0].get("warnings").is_none());
        let with = StatusRecord {
            warnings: vec![FieldWarning { path: "spec.x".into(), message: "m".into(), source: WarningSource::Plugin }],
            ..r
        };
        let written = serde_json::to_value(&with).unwrap();
        assert_eq!(written["warnings"], serde_json::json!([{"path": "spec.x", "message": "m", "source": "plugin"}]));
        assert_eq!(serde_json::from_value::<StatusRecord>(written).unwrap(), with);
    }

    /// A history entry of one reconcile, without warnings or trace.
    fn entry(time: Millis, reason: Reason, outcome: &str) -> HistoryEntry {
        HistoryEntry {
            time,
            reason,
            outcome: outcome.into(),
            duration_ms: 1,
            warnings: Vec::new(),
            trace_id: None,
            count: 1,
            first_time: None,
        }
    }

    #[test]
    fn history_keeps_the_last_ten_and_never_room_for_more() {
        let mut r = StatusRecord::default();
        for i in 0..15 {
            let reason = if i % 2 == 0 { Reason::Resync } else { Reason::ManualTrigger };
            r.push_history(entry(i, reason, "Synced"));
            assert!(r.history.capacity() <= HISTORY_LEN, "room for {} entries", r.history.capacity());
        }
        assert_eq!(r.history.len(), HISTORY_LEN);
        assert_eq!(r.history.front().unwrap().time, 5);
        assert!(r.history.iter().all(|e| e.count == 1), "no two entries in a row alike");
    }

    #[test]
    fn a_reconcile_that_repeats_the_last_entry_is_counted_into_it() {
        let mut r = StatusRecord::default();
        r.push_history(entry(1, Reason::Created, "Synced"));
        for t in 10..15 {
            r.push_history(HistoryEntry {
                trace_id: Some(format!("trace-{t}")),
                duration_ms: t,
                ..entry(t, Reason::Resync, "Synced")
            });
        }
        assert_eq!(r.history.len(), 2, "{:?}", r.history);
        let resyncs = &r.history[1];
        assert_eq!((resyncs.count, resyncs.first_time, resyncs.time), (5, Some(10), 14));
        assert_eq!((resyncs.duration_ms, resyncs.trace_id.as_deref()), (14, Some("trace-14")), "the newest one's");
        // A different outcome, or the same with other warnings, is an entry of its own; and
        // an entry counts only the repeats right after it.
        r.push_history(entry(20, Reason::Resync, "Error: boom"));
        r.push_history(entry(21, Reason::Resync, "Error: boom"));
        r.push_history(HistoryEntry {
            warnings: vec!["spec.x: unknown field, ignored".into()],
            ..entry(22, Reason::Resync, "Error: boom")
        });
        r.push_history(entry(30, Reason::Resync, "Synced"));
        let seen: Vec<_> = r.history.iter().map(|e| (e.reason, e.outcome.to_string(), e.count, e.time)).collect();
        assert_eq!(
            seen,
            [
                (Reason::Created, "Synced".to_string(), 1, 1),
                (Reason::Resync, "Synced".to_string(), 5, 14),
                (Reason::Resync, "Error: boom".to_string(), 2, 21),
                (Reason::Resync, "Error: boom".to_string(), 1, 22),
                (Reason::Resync, "Synced".to_string(), 1, 30),
            ]
        );
        // A counted entry is stored with its count and first time, and reads back the same.
        let v = serde_json::to_value(&r.history[1]).unwrap();
        assert_eq!((v["count"].as_u64(), v["firstTime"].as_u64()), (Some(5), Some(10)));
        assert_eq!(serde_json::from_value::<HistoryEntry>(v).unwrap(), r.history[1]);
        assert!(serde_json::to_value(&r.history[0]).unwrap().get("count").is_none(), "one is left out");
    }

    #[test]
    fn reasons_display_in_camel_case() {
        assert_eq!(Reason::DependencyChanged.to_string(), "dependencyChanged");
        // Kept by name: a unit's reason reads back as the same reason.
        for r in [Reason::SpecChanged, Reason::LeaderElected, Reason::Unit("serviceChanged")] {
            let text = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<Reason>(&text).unwrap(), r, "{text}");
        }
        assert_eq!(serde_json::to_string(&Reason::Unit("childChanged")).unwrap(), "\"childChanged\"");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn the_namespace_rule_defaults_namespaced_kinds_and_empties_cluster_scoped_ones() {
        assert_eq!(namespace_for(true, ""), "default");
        assert_eq!(namespace_for(true, "team-a"), "team-a");
        assert_eq!(namespace_for(false, ""), "");
        assert_eq!(namespace_for(false, "default"), "");
    }

    #[test]
    fn spec_hash_is_fnv1a_and_tells_specs_apart() {
        // FNV-1a reference values: the hash is stable across builds.
        assert_eq!(spec_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(spec_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"a"), spec_hash("a"));
        assert_eq!(spec_hash("{}"), spec_hash("{}"));
        assert_ne!(spec_hash("{\"a\":1}"), spec_hash("{\"a\":2}"));
    }

    #[test]
    fn source_locations_display_as_file_line_and_parse_back() {
        let at = SourceLocation::new("dir/a.yaml", 12);
        assert_eq!(at.to_string(), "dir/a.yaml:12");
        assert_eq!(SourceLocation::parse("dir/a.yaml:12"), at);
        // A Kubernetes API path has line 0; a colon inside the path is kept.
        let api = SourceLocation::new("/apis/x.dev/v1/namespaces/a:b/ks/n", 0);
        assert_eq!(SourceLocation::parse(&api.to_string()), api);
        // Text that is not `file:line` is a file at line 0, never an error.
        assert_eq!(SourceLocation::parse("a.yaml"), SourceLocation::new("a.yaml", 0));
        assert_eq!(SourceLocation::parse("a.yaml:"), SourceLocation::new("a.yaml:", 0));
        assert_eq!(SourceLocation::parse("a.yaml:x1"), SourceLocation::new("a.yaml:x1", 0));
        assert_eq!(
            SourceLocation::parse("a:99999999999999999999999"),
            SourceLocation::new("a:99999999999999999999999", 0)
        );
    }

    #[test]
    fn a_record_stored_by_an_earlier_version_still_loads_and_is_written_the_same_way() {
        // A record as earlier versions stored it: `source` is the text `file:line`.
        let old = r#"{"generation":3,"specHash":7,"phase":"Synced","observedGeneration":3,
            "lastReconcileTime":1,"lastSuccessTime":1,"retryCount":0,"nextAttemptTime":null,
            "lastError":null,"status":{"ready":true},"conditions":[],"plugin":"p","pluginVersion":"1",
            "history":[],"source":"team/servers.yaml:17","deleting":false}"#;
        let rec: StatusRecord = serde_json::from_str(old).unwrap();
        assert_eq!(rec.source, Some(SourceLocation::new("team/servers.yaml", 17)));
        assert_eq!(rec.generation, 3);
        assert_eq!(rec.api_version, "", "fields added later default");
        // Written back, it has the same form, so an older host reads it too.
        let v = serde_json::to_value(&rec).unwrap();
        assert_eq!(v["source"], "team/servers.yaml:17");
        let none: StatusRecord = serde_json::from_str(&old.replace(r#""team/servers.yaml:17""#, "null")).unwrap();
        assert_eq!(none.source, None);
        // And it round-trips through the store's encoding.
        assert_eq!(serde_json::from_value::<StatusRecord>(v).unwrap(), rec);
    }

    #[test]
    fn a_history_entry_carries_its_trace_id_and_older_entries_still_load() {
        let old = r#"{"time":1,"reason":"created","outcome":"Synced","durationMs":3}"#;
        let e: HistoryEntry = serde_json::from_str(old).unwrap();
        assert_eq!(e.trace_id, None);
        assert_eq!(serde_json::to_string(&e).unwrap(), old, "an entry without a trace is written as before");
        let traced = HistoryEntry { trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()), ..e };
        let v = serde_json::to_value(&traced).unwrap();
        assert_eq!(v["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(serde_json::from_value::<HistoryEntry>(v).unwrap(), traced);
    }
}

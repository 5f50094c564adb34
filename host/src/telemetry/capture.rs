//! A test subscriber layer that keeps every span's name, parent, fields and events, for tests that assert a span tree.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// One span as it was seen.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen {
    /// Its name.
    pub(crate) name: String,
    /// Its parent's name.
    pub(crate) parent: Option<String>,
    /// Its fields, as text, recorded at creation or later.
    pub(crate) fields: BTreeMap<String, String>,
    /// The fields of each event written inside it.
    pub(crate) events: Vec<BTreeMap<String, String>>,
}

/// The layer; clones share what they saw. Closed spans are kept: the registry reuses a closed
/// span's id, so spans are held in the order they began and only open ones are looked up by id.
#[derive(Clone, Default)]
pub(crate) struct Capture(Arc<Mutex<Spans>>);

#[derive(Default)]
struct Spans {
    all: Vec<Seen>,
    open: HashMap<u64, usize>,
}

impl Spans {
    fn get_mut(&mut self, id: &Id) -> Option<&mut Seen> {
        let at = *self.open.get(&id.into_u64())?;
        self.all.get_mut(at)
    }
}

impl Capture {
    /// Every span seen so far named `name`, open or closed, in the order they began.
    pub(crate) fn named(&self, name: &str) -> Vec<Seen> {
        self.lock().all.iter().filter(|s| s.name == name).cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spans> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets this layer as the current thread's subscriber (tasks of a current-thread runtime
    /// run there) until the guard drops; see [`install`].
    pub(crate) fn set_default(&self) -> tracing::subscriber::DefaultGuard {
        use tracing_subscriber::prelude::*;
        install(tracing_subscriber::registry().with(self.clone()))
    }
}

/// Sets `subscriber` as the current thread's subscriber until the guard drops, and sees every
/// event it is interested in even while sibling tests run on other threads without one.
///
/// Tracing caches each callsite's interest for the whole process, worked out when the line first
/// runs anywhere; while a single dispatcher is registered it asks only the registering thread's
/// own, so a sibling thread with none would cache "never" for a line this test waits to see. A
/// second dispatcher that lives as long as the process and is interested in nothing makes every
/// registration ask all live dispatchers: a line this subscriber wants is then checked per event.
pub(crate) fn install(
    subscriber: impl tracing::Subscriber + Send + Sync + 'static,
) -> tracing::subscriber::DefaultGuard {
    static ANCHOR: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    ANCHOR.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
    tracing::subscriber::set_default(subscriber)
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut seen = Seen { name: attrs.metadata().name().to_string(), ..Seen::default() };
        seen.parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.name().to_string());
        attrs.record(&mut Fields(&mut seen.fields));
        let mut inner = self.lock();
        let at = inner.all.len();
        inner.all.push(seen);
        inner.open.insert(id.into_u64(), at);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(seen) = self.lock().get_mut(id) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        self.lock().open.remove(&id.into_u64());
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else { return };
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        if let Some(seen) = self.lock().get_mut(&span.id()) {
            seen.events.push(fields);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_first_run_by_a_thread_without_a_subscriber_is_still_seen_by_the_installed_one() {
        fn line() {
            tracing::info_span!("first_run_elsewhere").in_scope(|| tracing::info!("inside"));
        }
        let capture = Capture::default();
        let _guard = capture.set_default();
        // A sibling test's thread, with no subscriber, is the first to run the line: tracing
        // works out the line's interest there, once for the whole process.
        std::thread::spawn(line).join().unwrap();
        line();
        let seen = capture.named("first_run_elsewhere");
        assert_eq!(seen.len(), 1, "the span run on this thread is captured");
        assert_eq!(seen[0].events.len(), 1, "and so is the event inside it");
    }
}

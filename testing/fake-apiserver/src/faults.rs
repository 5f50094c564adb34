//! Fault injection (error responses for matching requests) and the request log.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::status::ApiError;

/// What a request does, classified like the API server's request info.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET of one object (or of its status).
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`/`watch=1`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH (any patch type, including server-side apply).
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
    /// `/version`, `/api`, `/apis` and group-version discovery documents.
    Discovery,
    /// Anything else (unknown paths).
    Other,
}

/// One request as the server saw it, in arrival order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// HTTP method, e.g. `GET`.
    pub method: String,
    /// The path, e.g. `/apis/coordination.k8s.io/v1/namespaces/default/leases/lock`.
    pub path: String,
    /// The raw query string ("" when none).
    pub query: String,
    /// The classified verb.
    pub verb: Verb,
    /// The resource plural, when the path names a resource.
    pub resource: Option<String>,
    /// The subresource (`status`), when the path names one.
    pub subresource: Option<String>,
    /// The namespace from the path, when any.
    pub namespace: Option<String>,
    /// The object name from the path, when any.
    pub name: Option<String>,
    /// The HTTP status code answered (200 for a watch whose stream started, even if the stream
    /// then carried an ERROR event).
    pub status: u16,
    /// Whether the answer came from an injected [`Fault`].
    pub injected: bool,
}

/// An injected error: the next `times` requests matching every set criterion get this error
/// instead of being served. Build with [`Fault::new`] or a shortcut, narrow with the builder
/// methods, then pass to [`crate::FakeApiServer::inject`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// HTTP methods to match (`GET`, `PATCH`, ...); empty matches any.
    pub methods: Vec<String>,
    /// Substring the path must contain; None matches any.
    pub path_contains: Option<String>,
    /// Resource plural the path must name; None matches any.
    pub resource: Option<String>,
    /// Subresource the path must name (`status`); None matches the main resource and subresources.
    pub subresource: Option<String>,
    /// Verb the request must have; None matches any.
    pub verb: Option<Verb>,
    /// How many matching requests fail; `usize::MAX` for all of them.
    pub times: usize,
    /// HTTP status code of the error.
    pub code: u16,
    /// The Status `reason` (e.g. `Conflict`, `TooManyRequests`).
    pub reason: String,
    /// The Status `message`.
    pub message: String,
    /// Seconds for a `Retry-After` header (and `details.retryAfterSeconds`).
    pub retry_after: Option<u64>,
}

impl Fault {
    /// A fault answering `code` with `reason`, matching every request once.
    pub fn new(code: u16, reason: &str) -> Self {
        Fault {
            methods: Vec::new(),
            path_contains: None,
            resource: None,
            subresource: None,
            verb: None,
            times: 1,
            code,
            reason: reason.to_string(),
            message: format!("injected fault: {reason}"),
            retry_after: None,
        }
    }

    /// 409 Conflict with the optimistic-concurrency message.
    pub fn conflict() -> Self {
        Fault::new(409, "Conflict").message(
            "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 429 TooManyRequests with `Retry-After: seconds`.
    pub fn too_many_requests(retry_after_seconds: u64) -> Self {
        Fault::new(429, "TooManyRequests")
            .message("the server has received too many requests and has asked us to try again later")
            .retry_after(retry_after_seconds)
    }

    /// 403 Forbidden.
    pub fn forbidden() -> Self {
        Fault::new(403, "Forbidden").message("injected fault: forbidden")
    }

    /// 500 InternalError.
    pub fn internal_error() -> Self {
        Fault::new(500, "InternalError").message("Internal error occurred: injected fault")
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable() -> Self {
        Fault::new(503, "ServiceUnavailable").message("the server is currently unable to handle the request")
    }

    /// Only requests with this HTTP method (may be called several times).
    #[must_use]
    pub fn method(mut self, method: &str) -> Self {
        self.methods.push(method.to_ascii_uppercase());
        self
    }

    /// Only requests whose path contains `s`.
    #[must_use]
    pub fn path_contains(mut self, s: &str) -> Self {
        self.path_contains = Some(s.to_string());
        self
    }

    /// Only requests on this resource plural.
    #[must_use]
    pub fn resource(mut self, plural: &str) -> Self {
        self.resource = Some(plural.to_string());
        self
    }

    /// Only requests on this subresource (`status`).
    #[must_use]
    pub fn subresource(mut self, sub: &str) -> Self {
        self.subresource = Some(sub.to_string());
        self
    }

    /// Only requests with this verb.
    #[must_use]
    pub fn verb(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Fail this many matching requests (default 1; `usize::MAX` for all).
    #[must_use]
    pub fn times(mut self, times: usize) -> Self {
        self.times = times;
        self
    }

    /// The Status message.
    #[must_use]
    pub fn message(mut self, message: &str) -> Self {
        self.message = message.to_string();
        self
    }

    /// Send `Retry-After: seconds`.
    #[must_use]
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub(crate) fn matches(&self, r: &RequestRecord) -> bool {
        (self.methods.is_empty() || self.methods.contains(&r.method))
            && self.path_contains.as_deref().is_none_or(|p| r.path.contains(p))
            && self.resource.as_deref().is_none_or(|p| r.resource.as_deref() == Some(p))
            && self.subresource.as_deref().is_none_or(|s| r.subresource.as_deref() == Some(s))
            && self.verb.is_none_or(|v| v == r.verb)
    }

    pub(crate) fn error(&self) -> ApiError {
        let mut err = ApiError::new(self.code, &self.reason, self.message.clone());
        err.retry_after = self.retry_after;
        err
    }
}

/// A live injected fault: how often it fired, and a way to withdraw it.
#[derive(Clone, Debug)]
pub struct FaultHandle {
    pub(crate) id: usize,
    pub(crate) used: Arc<AtomicUsize>,
    pub(crate) times: usize,
    pub(crate) faults: Arc<std::sync::Mutex<Vec<ActiveFault>>>,
}

impl FaultHandle {
    /// How many requests this fault has answered so far.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    /// How many more requests it will answer (`usize::MAX` stays unbounded).
    pub fn remaining(&self) -> usize {
        if self.times == usize::MAX { usize::MAX } else { self.times.saturating_sub(self.used()) }
    }

    /// Withdraws the fault; later requests are served normally.
    pub fn cancel(&self) {
        crate::server::lock(&self.faults).retain(|f| f.id != self.id);
    }
}

#[derive(Debug)]
pub(crate) struct ActiveFault {
    pub id: usize,
    pub fault: Fault,
    pub used: Arc<AtomicUsize>,
}

/// Takes the first matching active fault for a request, counting its use; exhausted faults are dropped.
pub(crate) fn take(faults: &mut Vec<ActiveFault>, r: &RequestRecord) -> Option<ApiError> {
    let i = faults.iter().position(|f| f.fault.matches(r))?;
    let f = &faults[i];
    let used = f.used.fetch_add(1, Ordering::SeqCst) + 1;
    let err = f.fault.error();
    if f.fault.times != usize::MAX && used >= f.fault.times {
        faults.remove(i);
    }
    Some(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(method: &str, verb: Verb, resource: &str, sub: Option<&str>) -> RequestRecord {
        RequestRecord {
            method: method.into(),
            path: format!("/apis/x/v1/namespaces/d/{resource}/n"),
            query: String::new(),
            verb,
            resource: Some(resource.into()),
            subresource: sub.map(str::to_string),
            namespace: Some("d".into()),
            name: Some("n".into()),
            status: 0,
            injected: false,
        }
    }

    #[test]
    fn faults_match_and_run_out() {
        let f = Fault::forbidden().resource("widgets").subresource("status").verb(Verb::Patch).times(2);
        let mut active = vec![ActiveFault { id: 1, fault: f, used: Arc::new(AtomicUsize::new(0)) }];
        assert!(take(&mut active, &record("PATCH", Verb::Patch, "widgets", None)).is_none());
        assert!(take(&mut active, &record("PATCH", Verb::Patch, "leases", Some("status"))).is_none());
        let hit = record("PATCH", Verb::Patch, "widgets", Some("status"));
        assert_eq!(take(&mut active, &hit).unwrap().code, 403);
        assert_eq!(take(&mut active, &hit).unwrap().code, 403);
        assert!(take(&mut active, &hit).is_none());
        assert!(active.is_empty());
    }

    #[test]
    fn retry_after_goes_into_the_status() {
        let status = Fault::too_many_requests(3).error().to_status();
        assert_eq!(status["details"]["retryAfterSeconds"], 3);
        assert_eq!(status["code"], 429);
    }
}

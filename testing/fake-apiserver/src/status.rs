//! Error responses as Kubernetes `Status` objects (`kind: Status`, `status: Failure`).

use serde_json::{Value, json};

/// A group and resource (plural), printed the way the API server prints it in messages:
/// `leases.coordination.k8s.io`, or `namespaces` for the core group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GroupResource<'a> {
    pub group: &'a str,
    pub resource: &'a str,
}

impl std::fmt::Display for GroupResource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// One `details.causes` entry of a Status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

impl Cause {
    /// A field error with a Status cause `reason` (`FieldValueInvalid`, ...) and a full message.
    pub fn field(reason: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Cause { reason: reason.to_string(), message: message.into(), field: field.into() }
    }

    /// `field: Invalid value: "value": detail`.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        let value = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        Cause::field("FieldValueInvalid", field, format!("Invalid value: {value}: {detail}"))
    }

    /// `field: Required value: detail`.
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        Cause::field("FieldValueRequired", field, format!("Required value: {detail}"))
    }

    /// `field: Forbidden: detail`.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Cause::field("FieldValueForbidden", field, format!("Forbidden: {detail}"))
    }

    /// `field: Unsupported value: detail`.
    pub fn unsupported(field: impl Into<String>, detail: &str) -> Self {
        Cause::field("FieldValueNotSupported", field, format!("Unsupported value: {detail}"))
    }
}

/// An API error: HTTP code, `reason`, human message and optional `details`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError { code, reason: reason.to_string(), message: message.into(), details: None, retry_after: None }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn not_found(gr: &GroupResource<'_>, name: &str) -> Self {
        ApiError::new(404, "NotFound", format!("{gr} {name:?} not found"))
            .with_details(json!({"name": name, "group": gr.group, "kind": gr.resource}))
    }

    /// A 404 for a path that names no served resource (the real server answers `404 page not found`
    /// in plain text; a Status is friendlier to clients and still has code 404 and reason NotFound).
    pub fn no_route(path: &str) -> Self {
        ApiError::new(404, "NotFound", format!("the server could not find the requested resource ({path})"))
            .with_details(json!({}))
    }

    pub fn already_exists(gr: &GroupResource<'_>, name: &str) -> Self {
        ApiError::new(409, "AlreadyExists", format!("{gr} {name:?} already exists"))
            .with_details(json!({"name": name, "group": gr.group, "kind": gr.resource}))
    }

    /// `Operation cannot be fulfilled on {gr} "{name}": {detail}`.
    pub fn conflict(gr: &GroupResource<'_>, name: &str, detail: &str) -> Self {
        ApiError::new(409, "Conflict", format!("Operation cannot be fulfilled on {gr} {name:?}: {detail}"))
            .with_details(json!({"name": name, "group": gr.group, "kind": gr.resource}))
    }

    /// The optimistic-concurrency conflict of an update with a stale `resourceVersion`.
    pub fn stale(gr: &GroupResource<'_>, name: &str) -> Self {
        ApiError::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// A server-side apply conflict (409, reason Conflict, one cause per conflicting field).
    pub fn apply_conflict(message: String, causes: Vec<Cause>) -> Self {
        ApiError::new(409, "Conflict", message).with_details(json!({"causes": causes_json(&causes)}))
    }

    /// 422 Invalid: `{Kind}.{group} "{name}" is invalid: {causes}`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let listed: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        let text = if listed.len() == 1 { listed[0].clone() } else { format!("[{}]", listed.join(", ")) };
        ApiError::new(422, "Invalid", format!("{qualified} {name:?} is invalid: {text}"))
            .with_details(json!({"name": name, "group": group, "kind": kind, "causes": causes_json(&causes)}))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format ({content_type:?}) - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(403, "Forbidden", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(500, "InternalError", format!("Internal error occurred: {}", message.into()))
    }

    /// The Status object, as the body of an error response or the object of a watch `ERROR` event.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            let mut details = details.clone();
            if let Some(seconds) = self.retry_after
                && let Some(map) = details.as_object_mut()
            {
                map.insert("retryAfterSeconds".into(), json!(seconds));
            }
            status["details"] = details;
        } else if let Some(seconds) = self.retry_after {
            status["details"] = json!({"retryAfterSeconds": seconds});
        }
        status
    }
}

fn causes_json(causes: &[Cause]) -> Value {
    Value::Array(causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_status_has_the_real_shape() {
        let gr = GroupResource { group: "coordination.k8s.io", resource: "leases" };
        let status = ApiError::not_found(&gr, "lock").to_status();
        assert_eq!(status["message"], "leases.coordination.k8s.io \"lock\" not found");
        assert_eq!(status["details"], json!({"name": "lock", "group": "coordination.k8s.io", "kind": "leases"}));
        assert_eq!(status["code"], 404);
        assert_eq!(status["reason"], "NotFound");
    }

    #[test]
    fn invalid_lists_several_causes_in_brackets() {
        let causes = vec![Cause::required("a", "x"), Cause::forbidden("b", "y")];
        let err = ApiError::invalid("Thing", "example.com", "t", causes);
        assert_eq!(err.message, "Thing.example.com \"t\" is invalid: [a: Required value: x, b: Forbidden: y]");
        assert_eq!(err.code, 422);
    }
}

//! One AdmissionReview answered: the object as its plugin sees it, the host's field check and the
//! plugin's `validate` for a verdict, and the plugin's `lint` and the schema's dropped fields as
//! warnings.

use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, META_API_VERSION_V1, Operation};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use steward_sdk::FieldError;

use super::{ServedKind, WebhookHost};
use crate::config::{FailurePolicy, FieldValidation};
use crate::metrics::{KindLabel, KindResult, Metrics};
use crate::plugin::one_line;

/// Most field errors listed in a refusal's message (all are in its `details.causes`, up to [`MAX_CAUSES`]).
const MAX_LISTED: usize = 20;
/// Most causes in a refusal.
const MAX_CAUSES: usize = 100;
/// Most warnings in an answer (the API server and kubectl show each on a line).
const MAX_WARNINGS: usize = 20;
/// Longest warning; the API server may cut longer ones.
const MAX_WARNING_CHARS: usize = 256;

/// Why a request body is not something to answer: the webhook answers it with 400 and this text.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    /// Not JSON, or not shaped like an AdmissionReview.
    #[error("the body is not an admission.k8s.io/v1 AdmissionReview: {0}")]
    NotAReview(String),
    /// Another version or kind.
    #[error(
        "the body is a {0}; this webhook answers admission.k8s.io/v1 AdmissionReviews (its configuration asks for admissionReviewVersions [v1])"
    )]
    Version(String),
    /// A review without a request.
    #[error("the AdmissionReview has no request to answer")]
    NoRequest,
    /// A create or update without the object.
    #[error("the {operation} of {kind} `{name}` carries no object to validate")]
    NoObject {
        /// CREATE or UPDATE.
        operation: String,
        /// The kind.
        kind: String,
        /// The object's name.
        name: String,
    },
}

/// Answers AdmissionReviews for the kinds the host serves.
pub struct Reviewer {
    host: Arc<dyn WebhookHost>,
    field_validation: FieldValidation,
    failure_policy: FailurePolicy,
    deadline: Duration,
    metrics: Option<Arc<Metrics>>,
}

/// What the checks found about one object.
#[derive(Debug, Default, PartialEq)]
struct Findings {
    /// Field errors: the write is refused.
    errors: Vec<FieldError>,
    /// Text for the response's `warnings`.
    warnings: Vec<String>,
    /// The plugin could not say (it failed or ran out of time): the failure policy decides.
    failure: Option<String>,
}

impl Reviewer {
    /// A reviewer of `host`'s served kinds: unknown fields are handled as `field_validation`
    /// says; a plugin that fails, or does not answer within `deadline`, makes the answer what
    /// `failure_policy` says (`Fail`: refused; `Ignore`: allowed with a warning).
    pub fn new(
        host: Arc<dyn WebhookHost>,
        field_validation: FieldValidation,
        failure_policy: FailurePolicy,
        deadline: Duration,
    ) -> Self {
        let metrics = host.metrics();
        Self { host, field_validation, failure_policy, deadline, metrics }
    }

    /// The answer to the AdmissionReview `body`, or why it is not one. Each answer is counted in
    /// `steward_webhook_admissions_total{kind,result}` and timed in
    /// `steward_webhook_admission_duration_seconds{kind}` (when the host gives metrics).
    pub async fn review(&self, body: &[u8]) -> Result<AdmissionReview<DynamicObject>, BadReview> {
        let started = tokio::time::Instant::now();
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_slice(body).map_err(|e| BadReview::NotAReview(e.to_string()))?;
        if review.types.api_version != META_API_VERSION_V1 || review.types.kind != "AdmissionReview" {
            let t = &review.types;
            return Err(BadReview::Version(format!("{} {}", t.api_version, t.kind).trim().to_string()));
        }
        let req: AdmissionRequest<DynamicObject> = review.try_into().map_err(|_| BadReview::NoRequest)?;
        let served =
            self.host.served().into_iter().find(|s| s.info.group == req.kind.group && s.info.kind == req.kind.kind);
        // Only a served kind is a label value: anyone reaching the port may send any kind.
        let kind = served.as_ref().map(|s| crate::model::Name::from(&s.info.kind)).unwrap_or_default();
        let resp = self.answer(&req, served).await?;
        if let Some(m) = &self.metrics {
            let result = match (resp.allowed, resp.warnings.as_ref().is_some_and(|w| !w.is_empty())) {
                (false, _) => "denied",
                (true, true) => "warned",
                (true, false) => "allowed",
            };
            let label = KindResult { kind: kind.clone(), result };
            m.webhook_admissions.get_or_create(&label).inc();
            m.webhook_admission_time.get_or_create(&KindLabel { kind }).observe(started.elapsed().as_secs_f64());
        }
        Ok(resp.into_review())
    }

    /// The answer to `req`, whose kind is `served` (`None`: not served by the host).
    async fn answer(
        &self,
        req: &AdmissionRequest<DynamicObject>,
        served: Option<ServedKind>,
    ) -> Result<AdmissionResponse, BadReview> {
        let mut resp = AdmissionResponse::from(req);
        let Some((served, obj)) = to_check(req, served)? else { return Ok(resp) };
        let found = self.check(&served, req, obj).await;
        let described = describe(&served, req, obj);
        if !found.warnings.is_empty() {
            resp.warnings = Some(bounded_warnings(found.warnings));
        }
        if !found.errors.is_empty() {
            resp = refuse(resp, &served, &described, &found.errors);
        } else if let Some(failure) = found.failure {
            match self.failure_policy {
                FailurePolicy::Fail => {
                    resp.allowed = false;
                    resp.result = kube::core::Status::failure(
                        &format!(
                            "{described} could not be validated: {failure}; kubernetes.webhook.failurePolicy is Fail, so the write is refused (fix the plugin, or set Ignore to let such writes through unchecked)"
                        ),
                        "InternalError",
                    )
                    .with_code(500);
                }
                FailurePolicy::Ignore => {
                    let w = format!("not validated ({failure}); kubernetes.webhook.failurePolicy is Ignore");
                    resp.warnings.get_or_insert_with(Vec::new).push(truncate(&w));
                }
            }
        }
        Ok(resp)
    }

    /// The schema's field check, then the plugin's `validate` and `lint` side by side, each
    /// within the deadline.
    async fn check(&self, served: &ServedKind, req: &AdmissionRequest<DynamicObject>, obj: &DynamicObject) -> Findings {
        let plugin = &served.plugin;
        let mut raw = crate::kubernetes::source::to_source_object(&served.info, obj).raw;
        if raw.name.is_empty() {
            raw.name = req.name.clone();
        }
        if raw.namespace.is_empty() && served.info.namespaced {
            raw.namespace = req.namespace.clone().unwrap_or_default();
        }
        let checked = crate::schema::check_spec(self.field_validation, plugin.spec_schema(&raw.kind), &raw.spec);
        raw.spec = checked.spec;
        let mut found = Findings { errors: checked.errors, ..Findings::default() };
        found.warnings.extend(checked.warnings.iter().map(|w| format!("{}: {}", w.path, w.message)));
        let deadline = self.deadline;
        let (validated, linted) = tokio::join!(
            tokio::time::timeout(deadline, plugin.validate(&raw)),
            tokio::time::timeout(deadline, plugin.warnings(&raw)),
        );
        let name = plugin.name();
        match validated {
            Ok(Ok(errors)) => found.errors.extend(errors),
            Ok(Err(e)) => found.failure = Some(format!("the plugin {name} failed in validate: {}", clean(&e))),
            Err(_) => {
                let within = humantime::format_duration(deadline);
                found.failure = Some(format!("the plugin {name} did not validate it within {within}"));
            }
        }
        match linted {
            Ok(None) => {}
            Ok(Some(Ok(w))) => {
                let w = crate::schema::plugin_warnings(w);
                found.warnings.extend(w.iter().map(|w| format!("{}: {}", w.path, w.message)));
            }
            Ok(Some(Err(e))) => {
                found.warnings.push(format!("the plugin {name}'s warnings could not be read: {}", clean(&e)));
            }
            Err(_) => {
                let within = humantime::format_duration(deadline);
                found.warnings.push(format!("the plugin {name}'s warnings could not be read within {within}"));
            }
        }
        found.errors.sort_by(|a, b| a.path.cmp(&b.path).then_with(|| a.message.cmp(&b.message)));
        found.errors.dedup();
        found
    }
}

/// The served kind and object to check, or `None` when the request is let through as it is:
/// not a create or update; a kind no loaded plugin serves or that is disabled (`served` is
/// `None`); an object being deleted (its finalizers must come off); or an update that changes
/// neither spec, labels nor annotations (the host's finalizer, another controller's metadata).
fn to_check(
    req: &AdmissionRequest<DynamicObject>,
    served: Option<ServedKind>,
) -> Result<Option<(ServedKind, &DynamicObject)>, BadReview> {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Ok(None);
    }
    let Some(served) = served else { return Ok(None) };
    let obj = req.object.as_ref().ok_or_else(|| BadReview::NoObject {
        operation: format!("{:?}", req.operation).to_uppercase(),
        kind: req.kind.kind.clone(),
        name: req.name.clone(),
    })?;
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    if req.operation == Operation::Update && req.old_object.as_ref().is_some_and(|old| same_desired(old, obj)) {
        return Ok(None);
    }
    Ok(Some((served, obj)))
}

/// A plugin's error as a user may see it: one line, without absolute paths or credentials.
fn clean(e: &str) -> String {
    one_line(&crate::sanitize::sanitize(e))
}

/// Whether an update leaves what a plugin validates as it was: spec, labels, annotations.
fn same_desired(old: &DynamicObject, new: &DynamicObject) -> bool {
    old.data.get("spec") == new.data.get("spec")
        && old.metadata.labels == new.metadata.labels
        && old.metadata.annotations == new.metadata.annotations
}

/// The object as the API server names it in errors: `MCPServer.steward.dev "name"`.
fn describe(served: &ServedKind, req: &AdmissionRequest<DynamicObject>, obj: &DynamicObject) -> String {
    let name = obj.metadata.name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| req.name.clone());
    format!("{}.{} \"{name}\"", served.info.kind, served.info.group)
}

/// `resp` refusing the write as the API server refuses an invalid object (422 `Invalid`): the
/// message lists each field error as `path: message`, and `details.causes` has one cause per
/// error with its `field`.
fn refuse(
    mut resp: AdmissionResponse,
    served: &ServedKind,
    described: &str,
    errors: &[FieldError],
) -> AdmissionResponse {
    let mut listed: Vec<String> =
        errors.iter().take(MAX_LISTED).map(|e| format!("{}: {}", one_line(&e.path), one_line(&e.message))).collect();
    if errors.len() > MAX_LISTED {
        listed.push(format!("and {} more", errors.len() - MAX_LISTED));
    }
    let list = if listed.len() == 1 { listed.remove(0) } else { format!("[{}]", listed.join("; ")) };
    let causes = errors
        .iter()
        .take(MAX_CAUSES)
        .map(|e| StatusCause {
            reason: "FieldValueInvalid".into(),
            message: one_line(&e.message),
            field: one_line(&e.path),
        })
        .collect();
    resp.allowed = false;
    resp.result = kube::core::Status {
        status: Some(StatusSummary::Failure),
        code: 422,
        message: format!("{described} is invalid: {list}"),
        metadata: None,
        reason: "Invalid".into(),
        details: Some(StatusDetails {
            name: described.split('"').nth(1).unwrap_or_default().to_string(),
            group: served.info.group.clone(),
            kind: served.info.kind.clone(),
            uid: String::new(),
            causes,
            retry_after_seconds: 0,
        }),
    };
    resp
}

/// At most [`MAX_WARNINGS`] warnings (the last counting those left out), each at most
/// [`MAX_WARNING_CHARS`] characters on one line.
fn bounded_warnings(mut warnings: Vec<String>) -> Vec<String> {
    if warnings.len() > MAX_WARNINGS {
        let more = warnings.len() - (MAX_WARNINGS - 1);
        warnings.truncate(MAX_WARNINGS - 1);
        warnings.push(format!("{more} more warning(s) not shown"));
    }
    warnings.iter().map(|w| truncate(w)).collect()
}

fn truncate(w: &str) -> String {
    let w = one_line(w);
    if w.chars().count() <= MAX_WARNING_CHARS {
        return w;
    }
    let mut cut: String = w.chars().take(MAX_WARNING_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};
    use steward_sdk::RawObject;

    use super::*;
    use crate::kubernetes::webhook::Validates;

    /// How the fake plugin's `validate` behaves.
    #[derive(Clone)]
    enum Validate {
        Errors(Vec<FieldError>),
        Fails(&'static str),
        Hangs,
    }

    struct Fake {
        validate: Validate,
        lint: Option<Result<Vec<FieldError>, String>>,
        schema: Option<Value>,
        /// The specs `validate` was called with.
        seen: Mutex<Vec<String>>,
    }

    #[async_trait::async_trait]
    impl Validates for Fake {
        fn name(&self) -> &str {
            "fake"
        }
        fn spec_schema(&self, _kind: &str) -> Option<&Value> {
            self.schema.as_ref()
        }
        async fn validate(&self, obj: &RawObject) -> Result<Vec<FieldError>, String> {
            self.seen.lock().unwrap().push(obj.spec.clone());
            match &self.validate {
                Validate::Errors(e) => Ok(e.clone()),
                Validate::Fails(m) => Err(m.to_string()),
                Validate::Hangs => std::future::pending().await,
            }
        }
        async fn warnings(&self, _obj: &RawObject) -> Option<Result<Vec<FieldError>, String>> {
            self.lint.clone()
        }
    }

    struct Host(Vec<ServedKind>, Arc<Metrics>);

    impl WebhookHost for Host {
        fn served(&self) -> Vec<ServedKind> {
            self.0.clone()
        }
        fn leads(&self) -> bool {
            true
        }
        fn metrics(&self) -> Option<Arc<Metrics>> {
            Some(self.1.clone())
        }
    }

    fn fake(validate: Validate) -> Fake {
        Fake {
            validate,
            lint: None,
            schema: Some(json!({"type": "object", "properties": {"command": {"type": "string"}}})),
            seen: Mutex::new(Vec::new()),
        }
    }

    fn reviewer(plugin: Arc<Fake>, fv: FieldValidation, policy: FailurePolicy) -> Reviewer {
        let info = KindInfo {
            group: "steward.dev".into(),
            version: "v1alpha1".into(),
            kind: "MCPServer".into(),
            plural: "mcpservers".into(),
            namespaced: true,
            spec_schema: "{}".into(),
            resync_seconds: 0,
            columns: Vec::new(),
        };
        let host = Arc::new(Host(vec![ServedKind { info, plugin }], Arc::new(Metrics::new())));
        Reviewer::new(host, fv, policy, Duration::from_secs(2))
    }

    use steward_sdk::KindInfo;

    fn body(operation: &str, kind: &str, spec: Value, old_spec: Option<Value>) -> Vec<u8> {
        let obj = |spec: Value| {
            json!({"apiVersion": "steward.dev/v1alpha1", "kind": kind,
                   "metadata": {"name": "git", "namespace": "team", "generation": 1}, "spec": spec})
        };
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "steward.dev", "version": "v1alpha1", "kind": kind},
                "resource": {"group": "steward.dev", "version": "v1alpha1", "resource": "mcpservers"},
                "name": "git", "namespace": "team", "operation": operation,
                "userInfo": {"username": "alice"},
                "object": obj(spec), "oldObject": old_spec.map(obj), "dryRun": false
            }
        }))
        .unwrap()
    }

    /// The answer as the API server reads it.
    async fn answer(r: &Reviewer, body: &[u8]) -> Value {
        serde_json::to_value(r.review(body).await.unwrap()).unwrap()
    }

    fn err(path: &str, message: &str) -> FieldError {
        FieldError::new(path, message)
    }

    #[tokio::test]
    async fn a_valid_object_is_allowed_and_the_answer_is_a_v1_review_with_the_requests_uid() {
        let r = reviewer(Arc::new(fake(Validate::Errors(vec![]))), FieldValidation::Warn, FailurePolicy::Fail);
        let a = answer(&r, &body("CREATE", "MCPServer", json!({"command": "git"}), None)).await;
        assert_eq!(a["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(a["kind"], "AdmissionReview");
        assert_eq!(a["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(a["response"]["allowed"], true);
        assert!(a["response"].get("warnings").is_none(), "{a:#}");
    }

    #[tokio::test]
    async fn each_answer_is_counted_by_kind_and_result_and_timed() {
        let r = reviewer(Arc::new(fake(Validate::Errors(vec![]))), FieldValidation::Warn, FailurePolicy::Fail);
        let m = r.metrics.clone().unwrap();
        let count = |kind: &str, result: &str| {
            let text = m.render();
            let sample = format!("steward_webhook_admissions_total{{kind=\"{kind}\",result=\"{result}\"}} ");
            text.lines().find_map(|l| l.strip_prefix(&sample)).map_or(0, |v| v.parse::<u64>().unwrap())
        };
        answer(&r, &body("CREATE", "MCPServer", json!({"command": "git"}), None)).await;
        // An unknown field: allowed, with a warning.
        answer(&r, &body("CREATE", "MCPServer", json!({"command": "git", "zzz": 1}), None)).await;
        // Strict: the same is refused.
        let strict = Reviewer { field_validation: FieldValidation::Strict, ..r };
        answer(&strict, &body("CREATE", "MCPServer", json!({"command": "git", "zzz": 1}), None)).await;
        assert_eq!(
            (count("MCPServer", "allowed"), count("MCPServer", "warned"), count("MCPServer", "denied")),
            (1, 1, 1)
        );
        // A kind the host does not serve is let through and counted without its name.
        answer(&strict, &body("CREATE", "Anything", json!({}), None)).await;
        assert_eq!(count("", "allowed"), 1);
        let text = m.render();
        assert!(text.contains("steward_webhook_admission_duration_seconds_count{kind=\"MCPServer\"} 3"), "{text}");
        // A body that is not a review is no admission.
        assert!(strict.review(b"{}").await.is_err());
        assert_eq!(count("", "allowed") + count("MCPServer", "allowed"), 2);
    }

    #[tokio::test]
    async fn field_errors_refuse_the_write_with_each_path_in_the_message_and_the_causes() {
        let errors = vec![
            err("spec.url", "must be an http:// or https:// URL"),
            err("spec.command", "a stdio server needs a command"),
        ];
        let r = reviewer(Arc::new(fake(Validate::Errors(errors))), FieldValidation::Warn, FailurePolicy::Fail);
        let a = answer(&r, &body("CREATE", "MCPServer", json!({}), None)).await;
        let resp = &a["response"];
        assert_eq!(resp["allowed"], false);
        assert_eq!(resp["status"]["code"], 422);
        assert_eq!(resp["status"]["reason"], "Invalid");
        assert_eq!(
            resp["status"]["message"],
            "MCPServer.steward.dev \"git\" is invalid: [spec.command: a stdio server needs a command; spec.url: must be an http:// or https:// URL]"
        );
        assert_eq!(resp["status"]["details"]["kind"], "MCPServer");
        assert_eq!(resp["status"]["details"]["name"], "git");
        let fields: Vec<&str> = resp["status"]["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        assert_eq!(fields, ["spec.command", "spec.url"]);
        // One error: no brackets, as the API server writes it.
        let r = reviewer(
            Arc::new(fake(Validate::Errors(vec![err("spec.x", "bad")]))),
            FieldValidation::Warn,
            FailurePolicy::Fail,
        );
        let a = answer(&r, &body("UPDATE", "MCPServer", json!({"command": "b"}), Some(json!({"command": "a"})))).await;
        assert_eq!(a["response"]["status"]["message"], "MCPServer.steward.dev \"git\" is invalid: spec.x: bad");
    }

    #[tokio::test]
    async fn unknown_fields_are_dropped_before_validate_and_warned_about_or_refused_under_strict() {
        let plugin = Arc::new(fake(Validate::Errors(vec![])));
        let r = reviewer(plugin.clone(), FieldValidation::Warn, FailurePolicy::Fail);
        let a = answer(&r, &body("CREATE", "MCPServer", json!({"command": "git", "zzz": 1}), None)).await;
        assert_eq!(a["response"]["allowed"], true);
        assert_eq!(a["response"]["warnings"], json!(["spec.zzz: unknown field, ignored"]));
        assert_eq!(plugin.seen.lock().unwrap().as_slice(), [r#"{"command":"git"}"#], "the plugin sees the pruned spec");

        let r = reviewer(Arc::new(fake(Validate::Errors(vec![]))), FieldValidation::Strict, FailurePolicy::Fail);
        let a = answer(&r, &body("CREATE", "MCPServer", json!({"command": "git", "zzz": 1}), None)).await;
        assert_eq!(a["response"]["allowed"], false);
        let m = a["response"]["status"]["message"].as_str().unwrap();
        assert!(m.contains("spec.zzz: unknown field"), "{m}");

        let r = reviewer(Arc::new(fake(Validate::Errors(vec![]))), FieldValidation::Ignore, FailurePolicy::Fail);
        let a = answer(&r, &body("CREATE", "MCPServer", json!({"command": "git", "zzz": 1}), None)).await;
        assert_eq!((a["response"]["allowed"].clone(), a["response"].get("warnings")), (json!(true), None));
    }

    #[tokio::test]
    async fn the_plugins_lint_findings_are_warnings_and_a_failed_lint_only_a_warning() {
        let mut f = fake(Validate::Errors(vec![]));
        f.lint = Some(Ok(vec![err("spec.url", "a stdio server is a process Steward starts: its url is ignored")]));
        let r = reviewer(Arc::new(f), FieldValidation::Warn, FailurePolicy::Fail);
        let a = answer(&r, &body("CREATE", "MCPServer", json!({"command": "git", "zzz": 1}), None)).await;
        assert_eq!(a["response"]["allowed"], true);
        assert_eq!(
            a["response"]["warnings"],
            json!([
                "spec.zzz: unknown field, ignored",
                "spec.url: a stdio server is a process Steward starts: its url is ignored"
            ])
        );
        let mut f = fake(Validate::Errors(vec![]));
        f.lint = Some(Err("wasm trap: unreachable".into()));
        let r = reviewer(Arc::new(f), FieldValidation::Warn, FailurePolicy::Fail);
        let a = answer(&r, &body("CREATE", "MCPServer", json!({"command": "git"}), None)).await;
        assert_eq!(a["response"]["allowed"], true);
        assert_eq!(
            a["response"]["warnings"],
            json!(["the plugin fake's warnings could not be read: wasm trap: unreachable"])
        );
    }

    #[tokio::test]
    async fn many_or_long_warnings_are_bounded() {
        let mut f = fake(Validate::Errors(vec![]));
        f.lint = Some(Ok((0..30).map(|i| err(&format!("spec.f{i:02}"), &"x".repeat(400))).collect()));
        let r = reviewer(Arc::new(f), FieldValidation::Warn, FailurePolicy::Fail);
        let a = answer(&r, &body("CREATE", "MCPServer", json!({}), None)).await;
        let w = a["response"]["warnings"].as_array().unwrap();
        assert_eq!(w.len(), MAX_WARNINGS);
        assert!(w.iter().all(|w| w.as_str().unwrap().chars().count() <= MAX_WARNING_CHARS));
        assert_eq!(w.last().unwrap(), "11 more warning(s) not shown");
    }

    #[tokio::test]
    async fn a_failing_plugin_refuses_under_fail_and_lets_through_with_a_warning_under_ignore() {
        let r = reviewer(
            Arc::new(fake(Validate::Fails("wasm trap: unreachable"))),
            FieldValidation::Warn,
            FailurePolicy::Fail,
        );
        let a = answer(&r, &body("CREATE", "MCPServer", json!({}), None)).await;
        assert_eq!(a["response"]["allowed"], false);
        assert_eq!(a["response"]["status"]["code"], 500);
        let m = a["response"]["status"]["message"].as_str().unwrap();
        assert!(m.starts_with("MCPServer.steward.dev \"git\" could not be validated: the plugin fake failed in validate: wasm trap: unreachable"), "{m}");
        assert!(m.contains("failurePolicy is Fail"), "{m}");

        let r = reviewer(Arc::new(fake(Validate::Fails("boom"))), FieldValidation::Warn, FailurePolicy::Ignore);
        let a = answer(&r, &body("CREATE", "MCPServer", json!({}), None)).await;
        assert_eq!(a["response"]["allowed"], true);
        let w = a["response"]["warnings"][0].as_str().unwrap();
        assert!(w.contains("not validated (the plugin fake failed in validate: boom)"), "{w}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_plugin_that_does_not_answer_in_time_is_a_failure_with_the_deadline_named() {
        let r = reviewer(Arc::new(fake(Validate::Hangs)), FieldValidation::Warn, FailurePolicy::Fail);
        let a = answer(&r, &body("CREATE", "MCPServer", json!({}), None)).await;
        assert_eq!(a["response"]["allowed"], false);
        let m = a["response"]["status"]["message"].as_str().unwrap();
        assert!(m.contains("the plugin fake did not validate it within 2s"), "{m}");
    }

    #[tokio::test]
    async fn what_is_not_for_a_plugin_to_judge_is_allowed_without_asking_it() {
        let plugin = Arc::new(fake(Validate::Errors(vec![err("spec", "always wrong")])));
        let r = reviewer(plugin.clone(), FieldValidation::Warn, FailurePolicy::Fail);
        // A kind no plugin serves (or a disabled one).
        let a = answer(&r, &body("CREATE", "Workflow", json!({}), None)).await;
        assert_eq!(a["response"]["allowed"], true);
        // A delete, or a connect.
        let a = answer(&r, &body("DELETE", "MCPServer", json!({}), None)).await;
        assert_eq!(a["response"]["allowed"], true);
        // An update of metadata only (the host's finalizer): the spec is as it was.
        let a = answer(&r, &body("UPDATE", "MCPServer", json!({"x": 1}), Some(json!({"x": 1})))).await;
        assert_eq!(a["response"]["allowed"], true);
        // An object being deleted: its finalizers must come off whatever its spec.
        let mut b: Value =
            serde_json::from_slice(&body("UPDATE", "MCPServer", json!({"x": 2}), Some(json!({"x": 1})))).unwrap();
        b["request"]["object"]["metadata"]["deletionTimestamp"] = json!("2030-01-01T00:00:00Z");
        let a = answer(&r, &serde_json::to_vec(&b).unwrap()).await;
        assert_eq!(a["response"]["allowed"], true);
        assert!(plugin.seen.lock().unwrap().is_empty(), "the plugin was asked");
        // A spec change is judged.
        let a = answer(&r, &body("UPDATE", "MCPServer", json!({"x": 2}), Some(json!({"x": 1})))).await;
        assert_eq!(a["response"]["allowed"], false);
    }

    #[tokio::test]
    async fn a_body_that_is_not_an_admission_review_is_refused_with_the_reason() {
        let r = reviewer(Arc::new(fake(Validate::Errors(vec![]))), FieldValidation::Warn, FailurePolicy::Fail);
        let e = r.review(b"not json").await.unwrap_err().to_string();
        assert!(e.starts_with("the body is not an admission.k8s.io/v1 AdmissionReview: expected"), "{e}");
        let e =
            r.review(br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}"#).await.unwrap_err();
        assert!(e.to_string().contains("is a admission.k8s.io/v1beta1 AdmissionReview"), "{e}");
        let e = r.review(br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#).await.unwrap_err();
        assert!(matches!(e, BadReview::NoRequest), "{e}");
        let mut b: Value = serde_json::from_slice(&body("CREATE", "MCPServer", json!({}), None)).unwrap();
        b["request"]["object"] = Value::Null;
        let e = r.review(&serde_json::to_vec(&b).unwrap()).await.unwrap_err().to_string();
        assert_eq!(e, "the CREATE of MCPServer `git` carries no object to validate");
        b["request"]["operation"] = json!("EXPLODE");
        assert!(matches!(r.review(&serde_json::to_vec(&b).unwrap()).await, Err(BadReview::NotAReview(_))));
        for junk in ["[]", "{}", "null", r#"{"apiVersion": 1}"#] {
            assert!(r.review(junk.as_bytes()).await.is_err(), "{junk}");
        }
    }
}

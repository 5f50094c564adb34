//! The prompts of a namespace's ready MCPServers under muster's names, and `prompts/get` routed to the server that owns one.

use std::collections::BTreeSet;
use std::time::Duration;

use rmcp::model::{
    ClientRequest, ErrorData, GetPromptRequest, GetPromptRequestParams, GetPromptResult, JsonObject, Prompt,
    ServerResult,
};
use tokio_util::sync::CancellationToken;

use super::served::{self, Served};
use crate::engine::Engine;
use crate::model::ObjectKey;
use crate::services::{LiveSession, request_failure};

/// How long a server may take to answer `prompts/get` (or `resources/read`); the client can
/// cancel sooner.
pub const GET_TIMEOUT: Duration = Duration::from_secs(120);

/// One offered prompt.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The prompt as clients see it: its exposed name, and the rest as the server gave it.
    pub prompt: Prompt,
    /// The object that owns the service.
    pub owner: ObjectKey,
    /// The service's name among the owner's.
    pub service: String,
    /// The prompt's name on the server.
    pub name: String,
}

/// The prompts of `namespace` now, sorted by exposed name, each name once (on a clash, the
/// server first by namespace/name, then service, wins). Only servers that offer tools now
/// offer prompts.
pub fn list(engine: &Engine, namespace: &str) -> Vec<Entry> {
    collect(served::servers(engine, namespace))
}

fn collect(servers: Vec<Served>) -> Vec<Entry> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for s in servers {
        for p in s.live.offered.prompts.iter() {
            let exposed = s.naming.prompt(&p.name);
            if !seen.insert(exposed.clone()) {
                continue;
            }
            let mut prompt = p.clone();
            prompt.name = exposed;
            out.push(Entry { prompt, owner: s.owner.clone(), service: s.service.clone(), name: p.name.clone() });
        }
    }
    out.sort_by(|a, b| a.prompt.name.cmp(&b.prompt.name));
    out
}

/// The exposed names of the prompts of `namespace`.
pub fn names(engine: &Engine, namespace: &str) -> BTreeSet<String> {
    list(engine, namespace).into_iter().map(|e| e.prompt.name).collect()
}

/// The prompt `name` (exposed) of `namespace`, got from its server with `arguments`. The error
/// is what the client is answered: an unknown name is invalid params; a server's error keeps
/// its code, with the service's secret values redacted.
pub async fn get(
    engine: &Engine,
    namespace: &str,
    name: &str,
    arguments: Option<JsonObject>,
    cancel: CancellationToken,
) -> Result<GetPromptResult, ErrorData> {
    let entry = list(engine, namespace).into_iter().find(|e| e.prompt.name == name).ok_or_else(|| {
        ErrorData::invalid_params(format!("no ready MCPServer of namespace {namespace} offers prompt {name}"), None)
    })?;
    let live = engine.units().services().session(&entry.owner, &entry.service).ok_or_else(|| gone(&entry.owner))?;
    let mut params = GetPromptRequestParams::new(entry.name.clone());
    params.arguments = arguments;
    let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
    match ask(&live, request, "prompts/get", cancel).await? {
        ServerResult::GetPromptResult(r) => Ok(r),
        _ => Err(not_a_result(&entry.owner, "prompts/get")),
    }
}

/// The error of a server gone between the listing and the request.
pub(crate) fn gone(owner: &ObjectKey) -> ErrorData {
    ErrorData::internal_error(
        format!("MCPServer {}/{} is no longer connected; list again and retry", owner.namespace(), owner.name()),
        None,
    )
}

fn not_a_result(owner: &ObjectKey, method: &str) -> ErrorData {
    ErrorData::internal_error(
        format!(
            "MCPServer {}/{} answered {method} with something Steward does not pass on (it may ask for input first)",
            owner.namespace(),
            owner.name()
        ),
        None,
    )
}

/// Sends `request` on `live` and waits for the answer, at most [`GET_TIMEOUT`] or until
/// `cancel`. A server's error keeps its code and data; every error's words are redacted.
pub(crate) async fn ask(
    live: &LiveSession,
    request: ClientRequest,
    method: &str,
    cancel: CancellationToken,
) -> Result<ServerResult, ErrorData> {
    let answer = tokio::select! {
        r = live.peer.send_request(request) => r,
        () = cancel.cancelled() => return Err(ErrorData::internal_error(format!("{method} was cancelled"), None)),
        () = tokio::time::sleep(GET_TIMEOUT) => {
            return Err(ErrorData::internal_error(
                format!("the server did not answer {method} within {}", crate::services::human(GET_TIMEOUT)),
                None,
            ));
        }
    };
    match answer {
        Ok(r) => Ok(r),
        Err(rmcp::ServiceError::McpError(mut e)) => {
            e.message = live.redact(&e.message).into();
            if let Some(data) = e.data.as_mut() {
                live.redact_json(data);
            }
            Err(e)
        }
        Err(e) => {
            Err(ErrorData::internal_error(format!("{method} failed: {}", live.redact(&request_failure(&e).0)), None))
        }
    }
}

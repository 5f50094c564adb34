//! Creating and deleting objects through the API: `POST /api/v1/resources/{kind}/{namespace}` with a JSON body, and `DELETE` of one object.

use std::collections::BTreeMap;

use axum::extract::{Path, State, rejection::JsonRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use steward_sdk::RawObject;

use super::{Answer, Api, KeyPath, MAX_BODY, check_kind, error, key_from, path_params};
use crate::engine::RequestError;
use crate::model::is_dns_subdomain;

/// The body of `POST /api/v1/resources/{kind}/{namespace}`: the object to create.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateBody {
    /// The object's name; exactly one of `name` and `generateName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A prefix the host completes with five random characters, as Kubernetes does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    /// Its labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Its spec (a JSON object).
    #[serde(default)]
    pub spec: serde_json::Value,
}

/// The answer to a create: the key of the new object (`KIND/NAMESPACE/NAME`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Created {
    /// The new object's key.
    pub created: String,
}

/// The answer to a delete: the key of the object being deleted (its finalize follows).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deleted {
    /// The object's key.
    pub deleted: String,
}

/// `POST /api/v1/resources/{kind}/{namespace}`: 201 with [`Created`]; 400 for a bad body or
/// name, 404 for a kind no plugin serves, 409 when the object exists, 413 for a body over
/// [`MAX_BODY`].
pub(super) async fn create(
    State(api): State<Api>,
    p: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
    body: Result<axum::Json<CreateBody>, JsonRejection>,
) -> Answer {
    let (kind, namespace) = path_params(p)?;
    check_kind(&kind)?;
    let axum::Json(body) = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than the limit of {MAX_BODY} bytes; send a smaller object"),
            )
        } else {
            error(StatusCode::BAD_REQUEST, format!("the request body: {}", e.body_text()))
        }
    })?;
    let name = match (body.name, body.generate_name) {
        (Some(n), None) => n,
        (None, Some(prefix)) => format!("{prefix}{}", suffix()),
        _ => return Err(error(StatusCode::BAD_REQUEST, "give exactly one of `name` and `generateName`")),
    };
    if !is_dns_subdomain(&name) || name.len() > 63 {
        return Err(error(
            StatusCode::BAD_REQUEST,
            format!(
                "name `{name}` must be at most 63 lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
            ),
        ));
    }
    let key = key_from(&kind, &namespace, &name)?;
    if !body.spec.is_object() {
        return Err(error(StatusCode::BAD_REQUEST, "`spec` must be a JSON object"));
    }
    let obj = RawObject {
        kind: key.kind().to_string(),
        name: key.name().to_string(),
        namespace: key.namespace().to_string(),
        labels: body.labels,
        spec: body.spec.to_string(),
        generation: 1,
        ..RawObject::default()
    };
    match api.engine()?.create_object(obj).await {
        Ok(key) => Ok((StatusCode::CREATED, axum::Json(Created { created: key.to_string() })).into_response()),
        Err(e) => Err(request_error(e)),
    }
}

/// `DELETE /api/v1/resources/{kind}/{namespace}/{name}`: 202 with [`Deleted`]; the object's
/// finalize runs as for any delete. In filesystem mode only objects the host created can be
/// deleted this way (409 otherwise, saying which file to edit).
pub(super) async fn delete(State(api): State<Api>, p: KeyPath) -> Answer {
    let (kind, namespace, name) = path_params(p)?;
    let key = key_from(&kind, &namespace, &name)?;
    match api.engine()?.delete_object(&key).await {
        Ok(()) => Ok((StatusCode::ACCEPTED, axum::Json(Deleted { deleted: key.to_string() })).into_response()),
        Err(e) => Err(request_error(e)),
    }
}

fn request_error(e: RequestError) -> Response {
    let status = match &e {
        RequestError::NotFound(_) | RequestError::UnknownKind(_) => StatusCode::NOT_FOUND,
        RequestError::Exists(_) | RequestError::Refused(_) => StatusCode::CONFLICT,
        RequestError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string())
}

/// Five random lower-case letters and digits, as Kubernetes completes a `generateName`.
fn suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5).map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char).collect()
}

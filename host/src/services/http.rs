//! The HTTP client of remote probes: reqwest over the host's TLS settings (`crate::tls`), built once.

use std::sync::OnceLock;

use super::probe::error_text;
use crate::tls::client_config;

/// Redirects followed in a row at most.
const MAX_REDIRECTS: usize = 10;

/// The shared client; the error says why there is none (then no remote service can be probed).
pub(crate) fn client() -> Result<reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT.get_or_init(build).clone()
}

fn build() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .tls_backend_preconfigured(client_config()?)
        // As rmcp's default client: no idle connections (Delayed-ACK stalls), same-origin 307/308 only.
        .pool_max_idle_per_host(0)
        .redirect(same_origin_redirects())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {}", error_text(&e)))
}

/// Follows only same-origin 307 and 308 redirects, which keep the POST body;
/// anything else would drop the JSON-RPC message or replay headers to another host.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_builds() {
        client().unwrap();
    }
}

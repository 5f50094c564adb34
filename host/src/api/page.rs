//! The live status page: `GET /` and its stylesheet and script, embedded in the binary.
//!
//! The files hold no data: the script reads it from the API with the user's token and follows
//! `GET /api/v1/events`. So the files are served without the token, like `/healthz`, and
//! everything they show still needs it. Nothing is fetched from anywhere else at run time; the
//! `Content-Security-Policy` header makes the browser refuse anything but this host.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The page's HTML.
pub const INDEX_HTML: &str = include_str!("page/index.html");
/// The page's stylesheet.
pub const APP_CSS: &str = include_str!("page/app.css");
/// The page's script.
pub const APP_JS: &str = include_str!("page/app.js");

/// Only this host's files and API; no inline script, no frames.
const CSP: &str =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'";

/// One embedded file with its content type.
fn file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`.
pub(super) async fn index() -> Response {
    file("text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /app.css`.
pub(super) async fn css() -> Response {
    file("text/css; charset=utf-8", APP_CSS)
}

/// `GET /app.js`.
pub(super) async fn js() -> Response {
    file("text/javascript; charset=utf-8", APP_JS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_files() {
        assert!(INDEX_HTML.contains(r#"src="app.js""#) && INDEX_HTML.contains(r#"href="app.css""#));
        for text in [INDEX_HTML, APP_CSS, APP_JS] {
            assert!(!text.contains("http://") && !text.contains("https://"), "nothing is fetched from elsewhere");
        }
        assert!(!INDEX_HTML.contains("<script>"), "no inline script: the CSP forbids it");
    }
}

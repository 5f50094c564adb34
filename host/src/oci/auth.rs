//! Registry credentials from a Docker `config.json` or a token file; never printed, never logged.

use std::path::Path;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;

/// Why credentials could not be read; the message names the file, never a secret.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("cannot read the registry credentials {}: {message}", .file.display())]
    Read {
        /// The file.
        file: std::path::PathBuf,
        /// The I/O error.
        message: String,
    },
    /// The file is not what it should be.
    #[error("{}: {message}", .file.display())]
    Invalid {
        /// The file.
        file: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The credentials for `registry`: a bearer token from `token_file` (its whole content, trimmed),
/// else the entry for `registry` in the Docker `config.json` at `docker_config` (`auth`, or
/// `username` and `password`, or `identitytoken`), else anonymous.
pub fn credentials(
    registry: &str,
    docker_config: Option<&Path>,
    token_file: Option<&Path>,
) -> Result<RegistryAuth, AuthError> {
    if let Some(file) = token_file {
        let token = read(file)?;
        let token = token.trim();
        if token.is_empty() {
            return Err(AuthError::Invalid { file: file.into(), message: "the token file is empty".into() });
        }
        return Ok(RegistryAuth::Bearer(token.to_string()));
    }
    let Some(file) = docker_config else { return Ok(RegistryAuth::Anonymous) };
    let text = read(file)?;
    from_docker_config(registry, &text)
        .map_err(|message| AuthError::Invalid { file: file.into(), message })
        .map(|a| a.unwrap_or(RegistryAuth::Anonymous))
}

fn read(file: &Path) -> Result<String, AuthError> {
    std::fs::read_to_string(file).map_err(|e| AuthError::Read { file: file.into(), message: e.to_string() })
}

/// The entry for `registry` in a Docker `config.json` text; `None` when there is none.
fn from_docker_config(registry: &str, text: &str) -> Result<Option<RegistryAuth>, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|_| "not a Docker config.json (not JSON)".to_string())?;
    let Some(auths) = v.get("auths").and_then(|a| a.as_object()) else { return Ok(None) };
    let entry = auths.iter().find(|(k, _)| {
        let k = k.trim_start_matches("https://").trim_start_matches("http://");
        k.split('/').next() == Some(registry)
    });
    let Some((_, entry)) = entry else { return Ok(None) };
    let field = |name: &str| entry.get(name).and_then(|x| x.as_str()).filter(|s| !s.is_empty());
    if let Some(token) = field("identitytoken").or_else(|| field("registrytoken")) {
        return Ok(Some(RegistryAuth::Bearer(token.to_string())));
    }
    if let (Some(u), Some(p)) = (field("username"), field("password")) {
        return Ok(Some(RegistryAuth::Basic(u.to_string(), p.to_string())));
    }
    if let Some(auth) = field("auth") {
        let bad = || format!("the `auth` of {registry} is not base64 of user:password");
        let decoded = base64::engine::general_purpose::STANDARD.decode(auth.trim()).map_err(|_| bad())?;
        let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
        let (u, p) = decoded.split_once(':').ok_or_else(bad)?;
        return Ok(Some(RegistryAuth::Basic(u.to_string(), p.to_string())));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_entries_are_found_by_registry() {
        let text =
            r#"{"auths":{"https://reg.example:5000/v1/":{"auth":"dXNlcjpzM2NyZXQ="},"other":{"identitytoken":"tok"}}}"#;
        assert_eq!(
            from_docker_config("reg.example:5000", text).unwrap(),
            Some(RegistryAuth::Basic("user".into(), "s3cret".into()))
        );
        assert_eq!(from_docker_config("other", text).unwrap(), Some(RegistryAuth::Bearer("tok".into())));
        assert_eq!(from_docker_config("nowhere", text).unwrap(), None);
        let e = from_docker_config("x", r#"{"auths":{"x":{"auth":"!!"}}}"#).unwrap_err();
        assert!(e.contains("not base64") && !e.contains("!!"), "{e}");
    }

    #[test]
    fn a_token_file_wins_and_an_empty_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("token");
        std::fs::write(&t, "abc\n").unwrap();
        assert_eq!(credentials("r", None, Some(&t)).unwrap(), RegistryAuth::Bearer("abc".into()));
        std::fs::write(&t, "\n").unwrap();
        assert!(credentials("r", None, Some(&t)).unwrap_err().to_string().contains("empty"));
        assert_eq!(credentials("r", None, None).unwrap(), RegistryAuth::Anonymous);
        let e = credentials("r", Some(&dir.path().join("none.json")), None).unwrap_err().to_string();
        assert!(e.contains("none.json"), "{e}");
    }
}

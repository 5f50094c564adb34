//! The CNCF Wasm OCI artifact layout: the manifest Steward pushes, and the checks on one it pulls.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest media type (OCI image manifest v1).
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config media type of a Wasm artifact.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the one layer: the component itself.
pub const WASM_LAYER: &str = "application/wasm";
/// The largest manifest read from a registry.
pub const MAX_MANIFEST: usize = 4 * 1024 * 1024;
/// The largest plugin component pulled.
pub const MAX_LAYER: u64 = 256 * 1024 * 1024;

/// The `created` time written in every config: fixed, so that the same component and label always
/// give the same digest (the Unix epoch, as reproducible image builders such as ko write).
pub const CREATED: &str = "1970-01-01T00:00:00Z";

/// Annotation: the plugin's name, as `describe` says.
pub const ANNOTATION_NAME: &str = "dev.steward.plugin.name";
/// Annotation: the plugin's version.
pub const ANNOTATION_VERSION: &str = "dev.steward.plugin.version";
/// Annotation: the kinds it serves, comma-separated.
pub const ANNOTATION_KINDS: &str = "dev.steward.plugin.kinds";

/// An OCI content descriptor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// What the content is.
    pub media_type: String,
    /// `sha256:<hex>` of the content.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// Free-form annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// The descriptor of `bytes` as `media_type`.
    pub fn of(media_type: &str, bytes: &[u8]) -> Self {
        Self {
            media_type: media_type.into(),
            digest: sha256_digest(bytes),
            size: bytes.len() as u64,
            annotations: BTreeMap::new(),
        }
    }
}

/// An OCI image manifest, as far as Steward reads and writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// [`MANIFEST`]; optional on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers.
    pub layers: Vec<Descriptor>,
    /// Free-form annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The config blob of a Wasm artifact ([`WASM_CONFIG`]), as the CNCF Wasm OCI artifact layout
/// has it and `oci-wasm`'s `WasmConfig` reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    /// When the config was made, RFC 3339 (Steward writes [`CREATED`]).
    pub created: String,
    /// Who made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Always `wasm`.
    pub architecture: String,
    /// `wasip2` for a component, `wasip1` for a core module.
    pub os: String,
    /// The digest of each layer, in the manifest's order.
    pub layer_digests: Vec<String>,
    /// What the component imports and exports (present for a component).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<ConfigComponent>,
}

/// The `component` block of a [`WasmConfig`]: the component's world.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigComponent {
    /// The names it exports.
    pub exports: Vec<String>,
    /// The names it imports.
    pub imports: Vec<String>,
    /// The world it targets, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl WasmConfig {
    /// The config of the one layer `wasm` (whose descriptor is `layer`): a component's world
    /// read from its bytes; anything that is not a component is described as a core module.
    pub fn of(wasm: &[u8], layer: &Descriptor) -> Self {
        let world = super::world::of_component(wasm);
        Self {
            created: CREATED.into(),
            author: None,
            architecture: "wasm".into(),
            os: if world.is_some() { "wasip2" } else { "wasip1" }.into(),
            layer_digests: vec![layer.digest.clone()],
            component: world.map(|w| ConfigComponent { exports: w.exports, imports: w.imports, target: None }),
        }
    }
}

/// What `describe` says about a plugin, for the annotations of a pushed artifact.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginLabel {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The kinds it describes.
    pub kinds: Vec<String>,
}

/// A Wasm artifact ready to push: its config blob, its manifest and the manifest's bytes.
#[derive(Clone, Debug)]
pub struct Artifact {
    /// The config blob's bytes.
    pub config: Vec<u8>,
    /// The manifest.
    pub manifest: Manifest,
    /// The manifest as pushed (its digest names the artifact).
    pub manifest_bytes: Vec<u8>,
}

impl Artifact {
    /// The manifest digest, which names the artifact.
    pub fn digest(&self) -> String {
        sha256_digest(&self.manifest_bytes)
    }
}

/// Lays out `wasm` as a Wasm OCI artifact annotated with `label`, its config the full
/// [`WasmConfig`]. The same component and label always give the same manifest digest (nothing
/// time-dependent is written: `created` is [`CREATED`]).
pub fn wasm_artifact(wasm: &[u8], label: &PluginLabel) -> Artifact {
    let mut layer = Descriptor::of(WASM_LAYER, wasm);
    layer.annotations.insert("org.opencontainers.image.title".into(), format!("{}.wasm", label.name));
    let config = serde_json::to_vec(&WasmConfig::of(wasm, &layer)).unwrap_or_default();
    let annotations = BTreeMap::from([
        ("org.opencontainers.image.title".to_string(), label.name.clone()),
        ("org.opencontainers.image.version".to_string(), label.version.clone()),
        (ANNOTATION_NAME.to_string(), label.name.clone()),
        (ANNOTATION_VERSION.to_string(), label.version.clone()),
        (ANNOTATION_KINDS.to_string(), label.kinds.join(",")),
    ]);
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST.into()),
        config: Descriptor::of(WASM_CONFIG, &config),
        layers: vec![layer],
        annotations,
    };
    let manifest_bytes = serde_json::to_vec(&manifest).unwrap_or_default();
    Artifact { config, manifest, manifest_bytes }
}

/// Why a manifest is not a Wasm plugin artifact.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Not JSON of a manifest's shape.
    #[error("the manifest is not an OCI image manifest: {0}")]
    NotAManifest(String),
    /// A media type other than the Wasm layout's.
    #[error(
        "{what} has media type `{found}`, not `{expected}`; push the plugin with `steward plugin push` (or any tool writing the CNCF Wasm OCI layout)"
    )]
    MediaType {
        /// Which part.
        what: &'static str,
        /// What it says.
        found: String,
        /// What the layout says.
        expected: &'static str,
    },
    /// Not exactly one layer.
    #[error("the artifact has {0} layers; a Wasm plugin artifact has exactly one, the component")]
    Layers(usize),
    /// A layer larger than [`MAX_LAYER`].
    #[error("the component is {0} bytes; the limit is {MAX_LAYER}")]
    TooLarge(u64),
    /// A descriptor digest that is not `sha256:<hex>`.
    #[error("the layer digest `{0}` is not sha256:<64 hex digits>")]
    Digest(String),
}

/// Reads `bytes` as a manifest and checks it is the Wasm layout: the config media type
/// [`WASM_CONFIG`], exactly one [`WASM_LAYER`] layer of at most [`MAX_LAYER`] bytes.
/// Returns the manifest; its one layer is `layers[0]`.
pub fn check(bytes: &[u8]) -> Result<Manifest, LayoutError> {
    let m: Manifest = serde_json::from_slice(bytes).map_err(|e| LayoutError::NotAManifest(e.to_string()))?;
    if let Some(mt) = &m.media_type
        && mt != MANIFEST
    {
        return Err(LayoutError::MediaType { what: "the manifest", found: mt.clone(), expected: MANIFEST });
    }
    if m.config.media_type != WASM_CONFIG {
        return Err(LayoutError::MediaType {
            what: "the config",
            found: m.config.media_type.clone(),
            expected: WASM_CONFIG,
        });
    }
    let [layer] = m.layers.as_slice() else { return Err(LayoutError::Layers(m.layers.len())) };
    if layer.media_type != WASM_LAYER {
        return Err(LayoutError::MediaType {
            what: "the layer",
            found: layer.media_type.clone(),
            expected: WASM_LAYER,
        });
    }
    if layer.size > MAX_LAYER {
        return Err(LayoutError::TooLarge(layer.size));
    }
    super::reference::check_digest(&layer.digest).map_err(|_| LayoutError::Digest(layer.digest.clone()))?;
    Ok(m)
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label() -> PluginLabel {
        PluginLabel { name: "demo".into(), version: "1.0.0".into(), kinds: vec!["A".into(), "B".into()] }
    }

    #[test]
    fn a_pushed_layout_passes_its_own_check_and_is_reproducible() {
        let a = wasm_artifact(b"\0asm-component", &label());
        let m = check(&a.manifest_bytes).unwrap();
        assert_eq!(m.layers[0].digest, sha256_digest(b"\0asm-component"));
        assert_eq!(m.annotations[ANNOTATION_KINDS], "A,B");
        assert_eq!(m.config.digest, sha256_digest(&a.config));
        assert_eq!(a.digest(), wasm_artifact(b"\0asm-component", &label()).digest());
    }

    #[test]
    fn the_config_has_every_field_of_the_cncf_layout() {
        // An empty component: its world is empty, but it is a component.
        let a = wasm_artifact(b"\0asm\x0d\0\x01\0", &label());
        let c: serde_json::Value = serde_json::from_slice(&a.config).unwrap();
        assert_eq!(c["created"], CREATED);
        assert_eq!((c["architecture"].as_str(), c["os"].as_str()), (Some("wasm"), Some("wasip2")));
        assert_eq!(c["layerDigests"][0], a.manifest.layers[0].digest.as_str());
        assert_eq!(c["component"], serde_json::json!({ "exports": [], "imports": [] }));
        // A core module has no component block.
        let c: WasmConfig = serde_json::from_slice(&wasm_artifact(b"\0asm\x01\0\0\0", &label()).config).unwrap();
        assert_eq!((c.os.as_str(), c.component), ("wasip1", None));
    }

    #[test]
    fn other_media_types_and_layer_counts_are_refused() {
        let a = wasm_artifact(b"x", &label());
        let mut m = a.manifest.clone();
        m.layers[0].media_type = "application/vnd.oci.image.layer.v1.tar".into();
        let e = check(&serde_json::to_vec(&m).unwrap()).unwrap_err().to_string();
        assert!(e.contains("the layer has media type `application/vnd.oci.image.layer.v1.tar`"), "{e}");
        let mut m = a.manifest.clone();
        m.config.media_type = "application/vnd.oci.image.config.v1+json".into();
        assert!(check(&serde_json::to_vec(&m).unwrap()).unwrap_err().to_string().contains("the config"));
        let mut m = a.manifest.clone();
        m.layers.push(m.layers[0].clone());
        assert_eq!(check(&serde_json::to_vec(&m).unwrap()).unwrap_err(), LayoutError::Layers(2));
        let mut m = a.manifest;
        m.layers[0].size = MAX_LAYER + 1;
        assert!(matches!(check(&serde_json::to_vec(&m).unwrap()), Err(LayoutError::TooLarge(_))));
        assert!(matches!(check(b"{}"), Err(LayoutError::NotAManifest(_))));
    }
}

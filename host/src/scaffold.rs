//! `steward new plugin`: writes a ready-to-build plugin for one kind, in Rust or Python.

use std::path::{Path, PathBuf};

use crate::model::{is_dns_label, is_dns_subdomain, is_kind};

/// Where the SDK of the checkout this binary was built from lives, if it still does.
const BUILT_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");

/// Where the TypeScript SDK of the checkout this binary was built from lives, if it still does.
const BUILT_SDK_TS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk-ts");

/// The language of a generated plugin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// A Rust crate on the Steward SDK, built with cargo for `wasm32-wasip2`.
    #[default]
    Rust,
    /// A Python module built with componentize-py for the world `plugin-full`.
    Py,
    /// A TypeScript package on the TypeScript SDK (`sdk-ts`), built with componentize-js.
    Ts,
}

/// The WIT contract of the checkout this binary was built from, copied into a Python plugin.
const WIT: &str = include_str!("../../wit/plugin.wit");

/// The WASI packages the contract's world `plugin-full` names (`wasi:http` and what it uses),
/// copied beside it: a WIT package is parsed whole, so they must be there.
const WIT_DEPS: &[(&str, &str)] = &[
    ("wit/deps/cli.wit", include_str!("../../wit/deps/cli.wit")),
    ("wit/deps/clocks.wit", include_str!("../../wit/deps/clocks.wit")),
    ("wit/deps/filesystem.wit", include_str!("../../wit/deps/filesystem.wit")),
    ("wit/deps/http.wit", include_str!("../../wit/deps/http.wit")),
    ("wit/deps/io.wit", include_str!("../../wit/deps/io.wit")),
    ("wit/deps/random.wit", include_str!("../../wit/deps/random.wit")),
    ("wit/deps/sockets.wit", include_str!("../../wit/deps/sockets.wit")),
];

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPlugin {
    /// The plugin's name: a DNS-1123 label; also the crate's and the directory's name.
    pub name: String,
    /// The kind, CamelCase, for example `Greeting`.
    pub kind: String,
    /// The API group, a DNS subdomain with at least one dot.
    pub group: String,
    /// The API version, for example `v1alpha1`.
    pub version: String,
    /// The language (default Rust).
    pub lang: Lang,
}

/// Why a crate could not be generated; each message names the argument or path at fault.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// An argument is not of the form it must have.
    #[error("{what} `{value}` is not valid: {why}")]
    Invalid {
        /// The argument, for example `--kind`.
        what: &'static str,
        /// What was given.
        value: String,
        /// What it must be.
        why: &'static str,
    },
    /// The target directory exists and is not empty.
    #[error("{0} already exists and is not empty; choose another name or --dir")]
    Exists(PathBuf),
    /// No SDK to depend on.
    #[error(
        "cannot find the Steward SDK (looked for {0}); pass --sdk with the path of the SDK of a Steward checkout (sdk/ for Rust, sdk-ts/ for TypeScript)"
    )]
    NoSdk(PathBuf),
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What was written, and the commands that build and test it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    /// The plugin's directory.
    pub dir: PathBuf,
    /// The built plugin, relative to `dir`.
    pub artifact: PathBuf,
    /// Its language.
    pub lang: Lang,
}

impl Generated {
    /// The command, run in [`Generated::dir`], that builds a Rust plugin.
    pub const BUILD: &'static str = "cargo build --release --target wasm32-wasip2";
    /// The command, run in [`Generated::dir`], that runs a Rust plugin's native tests.
    pub const TEST: &'static str = "cargo test";

    /// The commands, run in [`Generated::dir`] in order, that build the plugin (and, for Rust,
    /// test its logic natively first).
    pub fn build_commands(&self) -> Vec<String> {
        match self.lang {
            Lang::Rust => {
                vec![Self::TEST.into(), "rustup target add wasm32-wasip2    # once".into(), Self::BUILD.into()]
            }
            Lang::Ts => vec!["npm install".into(), "npm run build".into()],
            Lang::Py => vec![
                "python3 -m venv .venv".into(),
                ".venv/bin/pip install -r requirements.txt".into(),
                format!(
                    ".venv/bin/componentize-py -d wit -w plugin-full componentize app -o {}",
                    self.artifact.display()
                ),
            ],
        }
    }

    /// The command, run in [`Generated::dir`], that runs its scenarios against the built component.
    pub fn scenario_command(&self) -> String {
        format!("steward plugin test {} scenarios.yaml", self.artifact.display())
    }
}

impl NewPlugin {
    /// Checks the arguments: a DNS-1123 label name, a CamelCase kind, a dotted DNS group, a Kubernetes-style version.
    pub fn new(name: &str, kind: &str, group: &str, version: &str) -> Result<Self, ScaffoldError> {
        Self::in_lang(name, kind, group, version, Lang::Rust)
    }

    /// [`NewPlugin::new`] in `lang`.
    pub fn in_lang(name: &str, kind: &str, group: &str, version: &str, lang: Lang) -> Result<Self, ScaffoldError> {
        // A DNS-1123 label that also makes a crate name: it starts with a letter.
        if !is_dns_label(name) || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            return Err(ScaffoldError::Invalid {
                what: "NAME",
                value: name.into(),
                why: "use lower-case letters, digits and '-', starting with a letter, at most 63 characters",
            });
        }
        if !is_kind(kind) {
            return Err(ScaffoldError::Invalid {
                what: "--kind",
                value: kind.into(),
                why: "use CamelCase letters and digits starting with an upper-case letter, for example `Greeting`",
            });
        }
        if !group.contains('.') || !is_dns_subdomain(group) {
            return Err(ScaffoldError::Invalid {
                what: "--group",
                value: group.into(),
                why: "use a DNS name with at least one dot, for example `example.dev`",
            });
        }
        let v = version.strip_prefix('v').unwrap_or("");
        let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
        let (major, rest) = v.split_at(digits);
        let ok_rest = rest.is_empty()
            || ["alpha", "beta"]
                .iter()
                .any(|p| rest.strip_prefix(p).is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())));
        if major.is_empty() || major.starts_with('0') || !ok_rest {
            return Err(ScaffoldError::Invalid {
                what: "--version",
                value: version.into(),
                why: "use a Kubernetes API version such as v1, v1beta1 or v1alpha1",
            });
        }
        Ok(Self { name: name.into(), kind: kind.into(), group: group.into(), version: version.into(), lang })
    }

    /// The kind's lower-case plural, by the usual English rules (`Policy` → `policies`, `Box` → `boxes`).
    pub fn plural(&self) -> String {
        let k = self.kind.to_ascii_lowercase();
        let consonant_y = k.ends_with('y') && !k[..k.len() - 1].ends_with(['a', 'e', 'i', 'o', 'u']);
        if consonant_y {
            format!("{}ies", &k[..k.len() - 1])
        } else if ["s", "x", "z", "ch", "sh"].iter().any(|e| k.ends_with(e)) {
            format!("{k}es")
        } else {
            format!("{k}s")
        }
    }

    /// The `.wasm` file the build writes: the name with `-` as `_` (cargo's rule for a crate).
    pub fn file(&self) -> String {
        format!("{}.wasm", self.name.replace('-', "_"))
    }

    /// Where the build writes the plugin, relative to the plugin's directory.
    pub fn artifact(&self) -> PathBuf {
        match self.lang {
            Lang::Rust => Path::new("target").join("wasm32-wasip2").join("release").join(self.file()),
            Lang::Py | Lang::Ts => PathBuf::from(self.file()),
        }
    }

    /// Writes the plugin into `parent/NAME`; a Rust crate depends on the SDK at `sdk` (default:
    /// the checkout this binary was built from). Refuses a non-empty target directory; writes
    /// nothing when a Rust crate's SDK cannot be found.
    pub fn write(&self, parent: &Path, sdk: Option<&Path>) -> Result<Generated, ScaffoldError> {
        let sdk_dep = match self.lang {
            Lang::Rust => {
                let sdk = sdk.map_or_else(|| PathBuf::from(BUILT_SDK), Path::to_path_buf);
                match sdk.join("Cargo.toml").is_file().then(|| sdk.canonicalize()) {
                    Some(Ok(p)) => format!("{{ path = {} }}", toml_string(&p.to_string_lossy())),
                    _ => return Err(ScaffoldError::NoSdk(sdk)),
                }
            }
            Lang::Ts => {
                let sdk = sdk.map_or_else(|| PathBuf::from(BUILT_SDK_TS), Path::to_path_buf);
                match sdk.join("package.json").is_file().then(|| sdk.canonicalize()) {
                    // A JSON string's body: the path's backslashes and quotes escaped.
                    Some(Ok(p)) => {
                        serde_json::to_string(&p.to_string_lossy()).unwrap_or_default().trim_matches('"').to_string()
                    }
                    _ => return Err(ScaffoldError::NoSdk(sdk)),
                }
            }
            Lang::Py => String::new(),
        };
        let dir = parent.join(&self.name);
        if dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
            return Err(ScaffoldError::Exists(dir));
        }
        let artifact = self.artifact();
        let fill = |t: &str| {
            t.replace("{{name}}", &self.name)
                .replace("{{kind}}", &self.kind)
                .replace("{{group}}", &self.group)
                .replace("{{version}}", &self.version)
                .replace("{{plural}}", &self.plural())
                .replace("{{file}}", &self.file())
                .replace("{{artifact}}", &artifact.to_string_lossy())
                .replace("{{sdk}}", &sdk_dep)
        };
        let common: [(&str, &str); 2] = [
            ("resource.yaml", include_str!("../templates/plugin/resource.yaml.tmpl")),
            ("scenarios.yaml", include_str!("../templates/plugin/scenarios.yaml.tmpl")),
        ];
        let own: &[(&str, &str)] = match self.lang {
            Lang::Rust => &[
                ("Cargo.toml", include_str!("../templates/plugin/Cargo.toml.tmpl")),
                ("src/lib.rs", include_str!("../templates/plugin/lib.rs.tmpl")),
                ("README.md", include_str!("../templates/plugin/README.md.tmpl")),
                (".gitignore", include_str!("../templates/plugin/gitignore.tmpl")),
            ],
            Lang::Ts => &[
                ("package.json", include_str!("../templates/plugin-ts/package.json.tmpl")),
                ("src/index.ts", include_str!("../templates/plugin-ts/index.ts.tmpl")),
                ("README.md", include_str!("../templates/plugin-ts/README.md.tmpl")),
                (".gitignore", include_str!("../templates/plugin-ts/gitignore.tmpl")),
            ],
            Lang::Py => &[
                ("app.py", include_str!("../templates/plugin-py/app.py.tmpl")),
                ("requirements.txt", include_str!("../templates/plugin-py/requirements.txt.tmpl")),
                ("README.md", include_str!("../templates/plugin-py/README.md.tmpl")),
                (".gitignore", include_str!("../templates/plugin-py/gitignore.tmpl")),
            ],
        };
        for (rel, template) in own.iter().chain(&common) {
            self.put(&dir, rel, &fill(template))?;
        }
        if self.lang == Lang::Py {
            // The contract as is: its text holds no placeholders.
            self.put(&dir, "wit/plugin.wit", WIT)?;
            for (rel, text) in WIT_DEPS {
                self.put(&dir, rel, text)?;
            }
        }
        Ok(Generated { dir, artifact, lang: self.lang })
    }

    fn put(&self, dir: &Path, rel: &str, text: &str) -> Result<(), ScaffoldError> {
        let path = dir.join(rel);
        let io = |source| ScaffoldError::Io { path: path.clone(), source };
        std::fs::create_dir_all(path.parent().unwrap_or(dir)).map_err(io)?;
        std::fs::write(&path, text).map_err(io)
    }
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(name: &str, kind: &str) -> Result<NewPlugin, ScaffoldError> {
        NewPlugin::new(name, kind, "example.dev", "v1alpha1")
    }

    #[test]
    fn bad_arguments_name_the_argument() {
        for (name, kind, group, version, what) in [
            ("Greeter", "Greeting", "example.dev", "v1", "NAME"),
            ("9lives", "Greeting", "example.dev", "v1", "NAME"),
            ("greeter", "greeting", "example.dev", "v1", "--kind"),
            ("greeter", "Greet-ing", "example.dev", "v1", "--kind"),
            ("greeter", "Greeting", "localhost", "v1", "--group"),
            ("greeter", "Greeting", "Example.dev", "v1", "--group"),
            ("greeter", "Greeting", "example.dev", "1", "--version"),
            ("greeter", "Greeting", "example.dev", "v0", "--version"),
            ("greeter", "Greeting", "example.dev", "v1gamma1", "--version"),
            ("greeter", "Greeting", "example.dev", "v1beta", "--version"),
        ] {
            let err = NewPlugin::new(name, kind, group, version).unwrap_err().to_string();
            assert!(err.starts_with(what), "{name} {kind} {group} {version}: {err}");
        }
        assert!(NewPlugin::new("my-plugin2", "Greeting2", "a.example.dev", "v2beta3").is_ok());
    }

    #[test]
    fn plurals_follow_english() {
        let plural = |k: &str| new("p", k).unwrap().plural();
        assert_eq!(plural("Greeting"), "greetings");
        assert_eq!(plural("Policy"), "policies");
        assert_eq!(plural("Gateway"), "gateways");
        assert_eq!(plural("Box"), "boxes");
        assert_eq!(plural("Class"), "classes");
        assert_eq!(plural("Patch"), "patches");
    }

    #[test]
    fn writes_a_crate_that_names_the_kind_and_depends_on_the_sdk() {
        let tmp = tempfile::tempdir().unwrap();
        let p = new("hello-world", "Greeting").unwrap();
        let g = p.write(tmp.path(), None).unwrap();
        assert_eq!(g.dir, tmp.path().join("hello-world"));
        assert_eq!(g.artifact, Path::new("target/wasm32-wasip2/release/hello_world.wasm"));
        let cargo = std::fs::read_to_string(g.dir.join("Cargo.toml")).unwrap();
        let sdk = Path::new(BUILT_SDK).canonicalize().unwrap();
        assert!(cargo.contains(&format!("steward-sdk = {{ path = \"{}\" }}", sdk.display())), "{cargo}");
        let lib = std::fs::read_to_string(g.dir.join("src/lib.rs")).unwrap();
        assert!(lib.contains("pub struct GreetingSpec"), "{lib}");
        assert!(lib.contains("const PLURAL: &'static str = \"greetings\";"));
        assert!(lib.contains("export_plugin!(name: \"hello-world\""));
        assert!(!lib.contains("{{"), "every placeholder is filled");
        let readme = std::fs::read_to_string(g.dir.join("README.md")).unwrap();
        assert!(readme.contains(Generated::BUILD) && readme.contains("hello_world.wasm"), "{readme}");
        let res = std::fs::read_to_string(g.dir.join("resource.yaml")).unwrap();
        assert!(res.contains("apiVersion: example.dev/v1alpha1\nkind: Greeting\n"), "{res}");
        let scenarios = std::fs::read_to_string(g.dir.join("scenarios.yaml")).unwrap();
        let parsed = crate::conformance::parse("scenarios.yaml", &scenarios).expect("the scenarios parse");
        assert_eq!(parsed.scenarios[0].object.kind, "Greeting");
        assert_eq!(parsed.scenarios[0].object.api_version, "example.dev/v1alpha1");
        assert!(scenarios.contains("release/hello_world.wasm scenarios.yaml"), "{scenarios}");
    }

    #[test]
    fn writes_a_typescript_package_on_the_checkout_s_sdk() {
        let tmp = tempfile::tempdir().unwrap();
        let p = NewPlugin::in_lang("hello-ts", "Greeting", "example.dev", "v1alpha1", Lang::Ts).unwrap();
        let g = p.write(tmp.path(), None).unwrap();
        assert_eq!(g.artifact, Path::new("hello_ts.wasm"));
        let package: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(g.dir.join("package.json")).unwrap()).unwrap();
        let sdk = Path::new(BUILT_SDK_TS).canonicalize().unwrap();
        assert_eq!(package["devDependencies"]["steward-plugin-sdk"], format!("file:{}", sdk.display()));
        assert_eq!(package["scripts"]["build"], "steward-ts build . -o hello_ts.wasm");
        assert_eq!(package["steward"]["capabilities"], serde_json::json!([]));
        let index = std::fs::read_to_string(g.dir.join("src/index.ts")).unwrap();
        assert!(index.contains("const Greeting = defineKind<Spec, Status>") && !index.contains("{{"), "{index}");
        let scenarios = std::fs::read_to_string(g.dir.join("scenarios.yaml")).unwrap();
        assert!(scenarios.contains("steward plugin test hello_ts.wasm scenarios.yaml"), "{scenarios}");
        assert_eq!(g.build_commands(), ["npm install", "npm run build"]);
    }

    #[test]
    fn refuses_a_non_empty_directory_and_a_missing_sdk() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("greeter")).unwrap();
        std::fs::write(tmp.path().join("greeter/keep.txt"), "mine").unwrap();
        let p = new("greeter", "Greeting").unwrap();
        assert!(matches!(p.write(tmp.path(), None), Err(ScaffoldError::Exists(_))));
        assert_eq!(std::fs::read_to_string(tmp.path().join("greeter/keep.txt")).unwrap(), "mine");
        let other = tempfile::tempdir().unwrap();
        let err = p.write(other.path(), Some(&tmp.path().join("nowhere"))).unwrap_err();
        assert!(matches!(err, ScaffoldError::NoSdk(_)), "{err}");
        assert!(err.to_string().contains("--sdk"), "{err}");
        assert!(!other.path().join("greeter").exists(), "nothing is written without an SDK");
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string(r#"C:\a "b""#), r#""C:\\a \"b\"""#);
    }
}

//! The Kubernetes manifests: `steward crds` and `steward rbac` run as the real binary on the
//! bundled plugins, and the files under `deploy/` checked against them and against each other.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::{Value, json};
use steward::kubernetes::crd::check_structural;

use crate::common::{install, wasm};

/// The bundled plugin packages (`steward_plugin_build::BUNDLED`) and the kinds each describes,
/// in the order it describes them.
const BUNDLED: [(&str, &[&str]); 5] = [
    ("mcpserver", &["MCPServer"]),
    ("workflow", &["Workflow"]),
    ("mcpservergroup", &["MCPServerGroup"]),
    ("workflowrun", &["WorkflowRun"]),
    ("toolpolicy", &["ToolPolicy", "EffectiveToolPolicy"]),
];

/// Every kind of the bundled plugins.
fn bundled_kinds() -> impl Iterator<Item = &'static str> {
    BUNDLED.iter().flat_map(|(_, kinds)| kinds.iter().copied())
}

/// The plural resource name of bundled kind `kind` (English plurals, not just an `s`).
fn plural_of(kind: &str) -> String {
    let lower = kind.to_lowercase();
    match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{lower}s"),
    }
}

#[test]
fn this_list_is_every_bundled_plugin() {
    let listed: Vec<&str> = BUNDLED.iter().map(|(p, _)| *p).collect();
    assert_eq!(listed, steward_plugin_build::BUNDLED);
}

fn steward() -> Command {
    crate::common::steward()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

/// `steward ARGS --plugin P...` over every bundled plugin.
fn with_bundled(args: &[&str]) -> Command {
    let mut cmd = steward();
    cmd.args(args);
    for (pkg, _) in BUNDLED {
        cmd.arg("--plugin").arg(wasm(pkg));
    }
    cmd
}

fn stdout_of(mut cmd: Command) -> String {
    let out = cmd.output().expect("the steward binary runs");
    assert!(out.status.success(), "{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn failure_of(mut cmd: Command) -> String {
    let out: Output = cmd.output().expect("the steward binary runs");
    assert!(!out.status.success(), "{cmd:?} succeeded: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The documents of a multi-document YAML text (empty documents left out).
fn docs(text: &str, what: &str) -> Vec<Value> {
    let all: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{what} is not YAML: {e}"));
    all.into_iter().filter(|d| !d.is_null()).collect()
}

/// What `steward crds` prints for the bundled plugins (run once per test binary).
fn crds_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| stdout_of(with_bundled(&["crds"])))
}

/// The grants of the deploy config that `deploy/base/rbac.yaml` is generated with.
const RBAC_GRANTS: &str = "deploy/rbac-grants.yaml";

/// What `steward rbac -c deploy/rbac-grants.yaml` prints for the bundled plugins (run once per
/// test binary): the deploy config's grants, so toolpolicy may manage its EffectiveToolPolicies.
fn rbac_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let grants = repo_root().join(RBAC_GRANTS).display().to_string();
        stdout_of(with_bundled(&["rbac", "-c", &grants]))
    })
}

fn crd_of<'a>(crds: &'a [Value], kind: &str) -> &'a Value {
    crds.iter().find(|c| c["spec"]["names"]["kind"] == kind).unwrap_or_else(|| panic!("no CRD for {kind}"))
}

fn spec_schema_of(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
}

#[test]
fn crds_prints_one_structural_crd_per_bundled_kind() {
    let crds = docs(crds_text(), "the output of `steward crds`");
    let names: Vec<&str> = crds.iter().filter_map(|c| c["metadata"]["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "effectivetoolpolicies.steward.dev",
            "mcpservergroups.steward.dev",
            "mcpservers.steward.dev",
            "toolpolicies.steward.dev",
            "workflowruns.steward.dev",
            "workflows.steward.dev"
        ]
    );
    for kind in bundled_kinds() {
        let crd = crd_of(&crds, kind);
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        let spec = &crd["spec"];
        let plural = plural_of(kind);
        assert_eq!(crd["metadata"]["name"], format!("{plural}.steward.dev"));
        assert_eq!(spec["group"], "steward.dev");
        assert_eq!(spec["scope"], "Namespaced");
        // The four original kinds have short names; the others none.
        let short = match kind {
            "MCPServer" => Some("mcps"),
            "MCPServerGroup" => Some("mcpg"),
            "Workflow" => Some("wf"),
            "WorkflowRun" => Some("wfr"),
            _ => None,
        };
        let mut names = json!({"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                               "listKind": format!("{kind}List"), "categories": ["steward"]});
        if let Some(short) = short {
            names["shortNames"] = json!([short]);
        }
        assert_eq!(spec["names"], names);
        let versions = spec["versions"].as_array().expect("versions");
        assert_eq!(versions.len(), 1, "{kind}");
        let v = &versions[0];
        assert_eq!(
            (v["name"].as_str(), v["served"].as_bool(), v["storage"].as_bool()),
            (Some("v1alpha1"), Some(true), Some(true))
        );
        assert_eq!(v["subresources"], json!({"status": {}}), "{kind}");
        let columns: Vec<(&str, &str, &str)> = v["additionalPrinterColumns"]
            .as_array()
            .expect("printer columns")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or(""),
                    c["type"].as_str().unwrap_or(""),
                    c["jsonPath"].as_str().unwrap_or(""),
                )
            })
            .collect();
        // The host's own columns, then the kind's (declared by its plugin), then Age.
        assert_eq!(
            columns[..3],
            [
                ("Phase", "string", ".status.steward.phase"),
                ("Ready", "string", r#".status.conditions[?(@.type=="Ready")].status"#),
                ("Reason", "string", r#".status.conditions[?(@.type=="Ready")].reason"#),
            ]
        );
        assert!(columns.len() > 4, "{kind} declares columns of its own: {columns:?}");
        assert_eq!(columns.last(), Some(&("Age", "date", ".metadata.creationTimestamp")));
        let schema = &v["schema"]["openAPIV3Schema"];
        if let Err(problems) = check_structural(schema) {
            panic!("the {kind} CRD is not structural: {problems:#?}");
        }
        assert_eq!(schema["properties"]["status"]["x-kubernetes-preserve-unknown-fields"], true);
        // It is a CRD the Kubernetes types read.
        let typed: Result<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
            _,
        > = serde_json::from_value(crd.clone());
        assert!(typed.is_ok(), "{kind}: {typed:?}");
    }
}

/// Walks the plugin's spec schema beside the CRD's and checks every field is there with the same
/// type, required list and enum values; returns how many nodes were compared.
fn same_fields(plugin: &Value, crd: &Value, path: &str) -> usize {
    // A `oneOf` of string constants (a Rust enum whose variants have docs) is one string enum in
    // the CRD, the variants' docs folded into its description.
    let constants = one_of_constants(plugin);
    let plugin = constants.as_ref().unwrap_or(plugin);
    let mut seen = 1;
    match plugin.get("type").and_then(Value::as_str) {
        Some(t) => assert_eq!(crd["type"], t, "{path}: type\nplugin: {plugin}\ncrd: {crd}"),
        // No single type (a free-form value, or alternatives of different types): the CRD takes anything.
        None => assert!(
            crd.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true))
                || crd.get("x-kubernetes-int-or-string") == Some(&json!(true)),
            "{path}: the plugin gives no type, so the CRD must keep any value\nplugin: {plugin}\ncrd: {crd}"
        ),
    }
    assert_eq!(plugin.get("required"), crd.get("required"), "{path}: required");
    let values = |v: &Value| -> Option<Vec<Value>> {
        v.get("enum").and_then(Value::as_array).map(|e| e.iter().filter(|x| !x.is_null()).cloned().collect())
    };
    assert_eq!(values(plugin), values(crd), "{path}: enum");
    if plugin.get("nullable") == Some(&json!(true)) {
        assert_eq!(crd["nullable"], true, "{path}: nullable");
    }
    if let Some(props) = plugin.get("properties").and_then(Value::as_object) {
        for (name, p) in props {
            let c = crd["properties"].get(name).unwrap_or_else(|| panic!("{path}.{name} is missing from the CRD"));
            seen += same_fields(p, c, &format!("{path}.{name}"));
        }
    }
    match plugin.get("additionalProperties") {
        Some(Value::Object(m)) if !m.is_empty() && plugin.get("properties").is_none() => {
            seen += same_fields(&plugin["additionalProperties"], &crd["additionalProperties"], &format!("{path}.*"));
        }
        Some(Value::Bool(true)) => assert_eq!(crd["x-kubernetes-preserve-unknown-fields"], true, "{path}: open map"),
        _ => {}
    }
    if let Some(items) = plugin.get("items") {
        seen += same_fields(items, &crd["items"], &format!("{path}[]"));
    }
    seen
}

/// `{"type": "string", "enum": [...]}` for a schema that is a `oneOf` of string enums only.
fn one_of_constants(schema: &Value) -> Option<Value> {
    let alternatives = schema.get("oneOf")?.as_array()?;
    let mut values = Vec::new();
    for a in alternatives {
        if a.get("type") != Some(&json!("string")) {
            return None;
        }
        values.extend(a.get("enum")?.as_array()?.iter().cloned());
    }
    Some(json!({"type": "string", "enum": values}))
}

#[test]
fn crd_spec_schemas_keep_every_field_of_the_plugins_own_schema() {
    let crds = docs(crds_text(), "the output of `steward crds`");
    for (pkg, kinds) in BUNDLED {
        let out = stdout_of({
            let mut c = steward();
            c.args(["plugin", "inspect"]).arg(wasm(pkg));
            c
        });
        let described: Value = serde_json::from_str(&out).expect("inspect prints JSON");
        for (i, kind) in kinds.iter().enumerate() {
            let plugin_schema = &described["kinds"][i]["specSchema"];
            assert_eq!(described["kinds"][i]["kind"], *kind);
            let seen = same_fields(plugin_schema, spec_schema_of(crd_of(&crds, kind)), &format!("{kind}.spec"));
            // WorkflowRun's spec is small (workflow, args, timeout, cancel); the others have many fields.
            let least = if *kind == "WorkflowRun" { 4 } else { 8 };
            assert!(seen >= least, "{kind}: only {seen} schema nodes compared");
        }
    }
}

/// Checks `value` against a structural schema as the API server would (type, nullable, enum,
/// required, properties, maps, items); returns the problems as `path: what`.
fn validate(value: &Value, schema: &Value, path: &str, problems: &mut Vec<String>) {
    if value.is_null() {
        if schema.get("nullable") != Some(&json!(true)) {
            problems.push(format!("{path}: null is not allowed"));
        }
        return;
    }
    let type_ok = match schema.get("type").and_then(Value::as_str) {
        None => true,
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some(other) => panic!("{path}: unknown type {other}"),
    };
    if !type_ok {
        problems.push(format!("{path}: {value} is not of type {}", schema["type"]));
        return;
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array)
        && !e.contains(value)
    {
        problems.push(format!("{path}: {value} is not one of {}", schema["enum"]));
    }
    if let Some(obj) = value.as_object() {
        for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            if let Some(r) = r.as_str()
                && !obj.contains_key(r)
            {
                problems.push(format!("{path}.{r}: Required value"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, v) in obj {
            match (props.and_then(|p| p.get(k)), schema.get("additionalProperties")) {
                (Some(s), _) => validate(v, s, &format!("{path}.{k}"), problems),
                (None, Some(s)) if s.is_object() => validate(v, s, &format!("{path}.{k}"), problems),
                // Pruned, or kept by x-kubernetes-preserve-unknown-fields: never an error.
                _ => {}
            }
        }
    }
    if let (Some(items), Some(s)) = (value.as_array(), schema.get("items")) {
        for (i, v) in items.iter().enumerate() {
            validate(v, s, &format!("{path}[{i}]"), problems);
        }
    }
}

/// The problems the CRDs find with the example resources of `kinds` (examples/local/resources).
fn example_problems(kinds: &[&str]) -> Vec<String> {
    let crds = docs(crds_text(), "the output of `steward crds`");
    let dir = repo_root().join("examples/local/resources");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).expect("examples/local/resources").filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "yaml")) {
        let text = std::fs::read_to_string(file).expect("readable example");
        for doc in docs(&text, &file.display().to_string()) {
            let kind = doc["kind"].as_str().unwrap_or_default();
            if !kinds.contains(&kind) {
                continue;
            }
            checked += 1;
            let at = format!("{}: {kind}/{}: spec", file.display(), doc["metadata"]["name"].as_str().unwrap_or("?"));
            validate(&doc["spec"], spec_schema_of(crd_of(&crds, kind)), &at, &mut problems);
        }
    }
    assert!(checked > 0, "no example of {kinds:?} in {}", dir.display());
    problems
}

#[test]
fn the_example_servers_and_groups_are_valid_custom_resources() {
    let problems = example_problems(&["MCPServer", "MCPServerGroup"]);
    assert!(problems.is_empty(), "the API server would refuse:\n{}", problems.join("\n"));
}

#[test]
fn the_example_workflows_are_valid_custom_resources() {
    let problems = example_problems(&["Workflow"]);
    assert!(problems.is_empty(), "the API server would refuse:\n{}", problems.join("\n"));
}

fn regenerate_hint() -> String {
    let plugins =
        BUNDLED.iter().map(|(p, _)| format!("--plugin target/plugins/{p}.wasm")).collect::<Vec<_>>().join(" ");
    format!(
        "regenerate them from the repository root:\n  cargo run -q -p steward-plugin-build -- --out target/plugins\n  \
         cargo run -q -p steward -- crds {plugins} > deploy/base/crds.yaml\n  \
         cargo run -q -p steward -- rbac -c {RBAC_GRANTS} {plugins} > deploy/base/rbac.yaml"
    )
}

#[test]
fn deploy_crds_and_rbac_are_what_the_commands_print_now() {
    for (file, now) in [("deploy/base/crds.yaml", crds_text()), ("deploy/base/rbac.yaml", rbac_text())] {
        let committed = std::fs::read_to_string(repo_root().join(file)).unwrap_or_default();
        assert!(committed == now, "{file} is out of step with the bundled plugins; {}", regenerate_hint());
    }
}

#[test]
fn rbac_grants_the_bundled_kinds_their_status_events_and_the_lease_and_no_crds() {
    let objects = docs(rbac_text(), "the output of `steward rbac`");
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(kinds, ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]);
    let role = &objects[1];
    let rule = |group: &str, resource: &str| -> Vec<String> {
        role["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| {
                r["apiGroups"] == json!([group])
                    && r["resources"].as_array().is_some_and(|rs| rs.contains(&json!(resource)))
            })
            .flat_map(|r| r["verbs"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    for plural in
        ["mcpservers", "workflows", "mcpservergroups", "workflowruns", "toolpolicies", "effectivetoolpolicies"]
    {
        let mut verbs = vec!["get", "list", "patch", "update", "watch"];
        if plural == "workflowruns" {
            // The host creates runs itself (nested workflows, `/mcp`, `steward workflow run`).
            verbs = vec!["get", "list", "patch", "update", "watch", "create", "delete"];
        }
        if plural == "effectivetoolpolicies" {
            // toolpolicy's children, by the grant in deploy/rbac-grants.yaml: the children
            // rule (create, delete, list, patch, watch), then the served kind's.
            verbs = vec!["create", "delete", "list", "patch", "watch", "get", "list", "patch", "update", "watch"];
        }
        assert_eq!(rule("steward.dev", plural), verbs, "{plural}");
        assert_eq!(rule("steward.dev", &format!("{plural}/status")), ["get", "patch", "update"], "{plural}/status");
    }
    assert_eq!(rule("", "events"), ["create", "patch"]);
    assert_eq!(rule("events.k8s.io", "events"), ["create", "patch"]);
    assert!(!rbac_text().contains("apiextensions.k8s.io\n"), "the runtime role must not touch CRDs");
    assert!(rbac_text().contains("is an admin action"), "the YAML says installing CRDs is not granted");
    let lease_role = &objects[3];
    assert_eq!(lease_role["metadata"]["namespace"], "steward");
    assert_eq!(lease_role["rules"][0]["apiGroups"], json!(["coordination.k8s.io"]));
    assert_eq!(lease_role["rules"][0]["resources"], json!(["leases"]));
    // Options reach the objects.
    let custom = docs(
        &stdout_of(with_bundled(&["rbac", "--namespace", "ops", "--service-account", "runner", "--name", "steward-a"])),
        "custom rbac",
    );
    assert_eq!(
        custom[0]["metadata"],
        json!({"name": "runner", "namespace": "ops", "labels": {"app.kubernetes.io/part-of": "steward"}})
    );
    assert_eq!(custom[2]["subjects"], json!([{"kind": "ServiceAccount", "name": "runner", "namespace": "ops"}]));
    assert_eq!(custom[4]["roleRef"]["name"], "steward-a-leader-election");
    let e = failure_of(with_bundled(&["rbac", "--namespace", "Not_A_Name"]));
    assert!(e.contains("--namespace `Not_A_Name` is not a valid name"), "{e}");
}

#[test]
fn crds_from_a_config_serve_only_the_kinds_it_enables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugins dir");
    for (pkg, _) in BUNDLED {
        install(&wasm(pkg), &plugins.join(format!("{pkg}.wasm")));
    }
    let cfg = dir.path().join("steward.yaml");
    std::fs::write(
        &cfg,
        "mode: kubernetes\nplugin_dir: plugins\nplugins:\n  workflow: { kinds: [] }\n  workflowrun: { kinds: [] }\n  \
         toolpolicy: { kinds: [] }\n",
    )
    .expect("config");
    let mut cmd = steward();
    cmd.args(["crds", "--config"]).arg(&cfg);
    let crds = docs(&stdout_of(cmd), "crds from a config");
    let names: Vec<&str> = crds.iter().filter_map(|c| c["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["mcpservergroups.steward.dev", "mcpservers.steward.dev"]);
    // The same narrowing for RBAC.
    let mut cmd = steward();
    cmd.args(["rbac", "-c"]).arg(&cfg);
    let rbac = stdout_of(cmd);
    assert!(rbac.contains("- mcpservers\n") && !rbac.contains("workflows"), "{rbac}");
    // Kinds listed that the plugin does not have are pointed out.
    std::fs::write(&cfg, "plugin_dir: plugins\nplugins:\n  workflow: { kinds: [Workflows] }\n").expect("config");
    let mut cmd = steward();
    cmd.args(["crds", "--config"]).arg(&cfg);
    let out = cmd.output().expect("runs");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("plugins.workflow.kinds") && err.contains("names Workflows"), "{err}");
}

#[test]
fn crds_errors_name_the_file_and_say_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = dir.path().join("broken.wasm");
    std::fs::write(&broken, b"nope").expect("write");
    let mut cmd = steward();
    cmd.args(["crds", "--plugin"]).arg(&broken);
    let e = failure_of(cmd);
    assert!(e.contains("broken.wasm") && e.contains("not a WebAssembly file"), "{e}");

    let mut cmd = steward();
    cmd.args(["crds", "--plugin"]).arg(dir.path().join("missing.wasm"));
    let e = failure_of(cmd);
    assert!(e.contains("cannot read the plugin") && e.contains("missing.wasm"), "{e}");

    let mut cmd = steward();
    cmd.current_dir(dir.path()).arg("crds");
    let e = failure_of(cmd);
    assert!(e.contains("no --plugin given and no config file steward.yaml"), "{e}");

    let mut cmd = steward();
    cmd.args(["crds", "--plugin"]).arg(wasm("mcpserver")).arg("--plugin").arg(wasm("mcpserver"));
    let e = failure_of(cmd);
    assert!(e.contains("kind MCPServer is described by both"), "{e}");

    std::fs::create_dir(dir.path().join("empty")).expect("dir");
    std::fs::write(dir.path().join("steward.yaml"), "plugin_dir: empty\n").expect("config");
    let mut cmd = steward();
    cmd.current_dir(dir.path()).arg("crds");
    let e = failure_of(cmd);
    assert!(e.contains("there are no *.wasm plugins in") && e.contains("plugin_dir of steward.yaml"), "{e}");
}

/// A `steward` command whose cluster comes from `kubeconfig` only (no in-cluster settings, no ~/.kube).
fn with_kubeconfig(kubeconfig: &Path, home: &Path) -> Command {
    let mut cmd = steward();
    cmd.env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .args(["crds", "--apply", "--plugin"])
        .arg(wasm("mcpservergroup"));
    cmd
}

#[test]
fn crds_apply_without_a_reachable_cluster_names_the_server_and_the_kubeconfig() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A port nothing listens on: bound, then freed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .expect("kubeconfig");
    let e = failure_of(with_kubeconfig(&kubeconfig, dir.path()));
    assert!(e.contains(&format!("cannot reach the Kubernetes API server at https://127.0.0.1:{port}/")), "{e}");
    assert!(e.contains("mcpservergroups.steward.dev") && e.contains("KUBECONFIG"), "{e}");

    let e = failure_of(with_kubeconfig(&dir.path().join("no-such-kubeconfig"), dir.path()));
    assert!(e.contains("cannot find a Kubernetes cluster to apply the CRDs to") && e.contains("KUBECONFIG"), "{e}");
}

/// Every YAML document under deploy/base/ (the manifests `kubectl apply -k deploy/` applies), by file name.
fn deploy_docs() -> Vec<(String, Vec<Value>)> {
    let dir = repo_root().join("deploy/base");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).expect("deploy/").filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    files
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
        .map(|f| {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let text = std::fs::read_to_string(&f).expect("readable");
            let d = docs(&text, &format!("deploy/base/{name}"));
            (name, d)
        })
        .collect()
}

fn find<'a>(all: &'a [(String, Vec<Value>)], kind: &str) -> &'a Value {
    all.iter().flat_map(|(_, d)| d).find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind} in deploy/base/"))
}

#[test]
fn the_deploy_manifests_parse_and_fit_together() {
    let all = deploy_docs();
    let names: BTreeSet<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    for (name, d) in &all {
        assert!(!d.is_empty(), "deploy/{name} has no document");
        for doc in d {
            assert!(doc["apiVersion"].is_string() && doc["kind"].is_string(), "deploy/{name}: {doc}");
        }
    }
    // kustomization.yaml lists every other manifest, and only those.
    let kustomization = find(&all, "Kustomization");
    let listed: BTreeSet<&str> =
        kustomization["resources"].as_array().expect("resources").iter().filter_map(Value::as_str).collect();
    let others: BTreeSet<&str> = names.iter().copied().filter(|n| *n != "kustomization.yaml").collect();
    assert_eq!(listed, others);

    let namespace = find(&all, "Namespace")["metadata"]["name"].as_str().expect("namespace name").to_string();
    for (name, d) in &all {
        for doc in d {
            let kind = doc["kind"].as_str().unwrap_or_default();
            if ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service"].contains(&kind) {
                assert_eq!(doc["metadata"]["namespace"], namespace.as_str(), "deploy/{name}: {kind}");
            }
        }
    }

    // The config: Kubernetes mode, and a valid host config.
    let cm = find(&all, "ConfigMap");
    let text = cm["data"]["steward.yaml"].as_str().expect("steward.yaml in the ConfigMap");
    let raw: Value = serde_saphyr::from_str(text).expect("steward.yaml is YAML");
    assert_eq!(raw["mode"], "kubernetes");
    let cfg = steward::config::Config::parse(text, Path::new("steward.yaml"), Path::new("/etc/steward"))
        .unwrap_or_else(|e| panic!("the ConfigMap's steward.yaml: {e}"));
    assert_eq!(cfg.api.listen.to_string(), "0.0.0.0:8080");
    // rbac.yaml is generated with the config's grants that need RBAC: the same as the config's.
    let grants_text = std::fs::read_to_string(repo_root().join(RBAC_GRANTS)).expect("deploy/rbac-grants.yaml");
    let grants: Value = serde_saphyr::from_str(&grants_text).expect("deploy/rbac-grants.yaml is YAML");
    for (plugin, granted) in grants["plugins"].as_object().expect("plugins in deploy/rbac-grants.yaml") {
        assert_eq!(&raw["plugins"][plugin], granted, "plugins.{plugin}: {RBAC_GRANTS} and base/config.yaml differ");
    }
    assert!(!raw["plugins"]["toolpolicy"].is_null(), "base/config.yaml grants toolpolicy its children");

    // The Deployment runs it as the ServiceAccount of rbac.yaml, probed on /healthz and /readyz.
    let deployment = find(&all, "Deployment");
    let sa = find(&all, "ServiceAccount");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 2);
    // Standbys are ready too, so a rolling update brings a new replica up before it stops an
    // old one, and `kubectl rollout status` sees every replica Ready.
    let strategy = &deployment["spec"]["strategy"];
    assert_eq!(strategy["type"], "RollingUpdate");
    assert_eq!(strategy["rollingUpdate"]["maxUnavailable"], 0, "a rolling update keeps both replicas");
    // The pod gets longer than the host's own bound on stopping before it is killed.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().expect("terminationGracePeriodSeconds");
    assert!(grace > steward::host::SHUTDOWN_LIMIT.as_secs(), "terminationGracePeriodSeconds {grace}");
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(sa["metadata"]["namespace"], deployment["metadata"]["namespace"]);
    let binding = find(&all, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
    let container = &pod["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let port = &container["ports"][0];
    assert_eq!(port["containerPort"], cfg.api.listen.port());
    assert_eq!(container["livenessProbe"]["httpGet"]["port"], port["name"]);
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], port["name"]);
    assert_eq!(container["args"], json!(["run", "--config", "/etc/steward/steward.yaml"]));
    let env = container["env"].as_array().expect("env");
    assert!(env.iter().any(|e| e["name"] == "POD_NAME" && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"));
    let sc = &container["securityContext"];
    assert_eq!((sc["readOnlyRootFilesystem"].clone(), sc["runAsNonRoot"].clone()), (json!(true), json!(true)));
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert!(container["resources"]["requests"].is_object() && container["resources"]["limits"].is_object());

    // Every path of the config is on a volume: read-only config and token, writable state and cache.
    let mounts = container["volumeMounts"].as_array().expect("mounts");
    let mount_of = |path: &Path| -> &Value {
        mounts
            .iter()
            .filter(|m| m["mountPath"].as_str().is_some_and(|mp| path.starts_with(mp)))
            .max_by_key(|m| m["mountPath"].as_str().map_or(0, str::len))
            .unwrap_or_else(|| panic!("{} is on no volume", path.display()))
    };
    let volume = |m: &Value| -> Value {
        pod["volumes"].as_array().into_iter().flatten().find(|v| v["name"] == m["name"]).cloned().unwrap_or_default()
    };
    assert_eq!(volume(mount_of(Path::new("/etc/steward/steward.yaml")))["configMap"]["name"], cm["metadata"]["name"]);
    let token = cfg.api.token_file.as_deref().expect("a token file");
    assert!(volume(mount_of(token))["secret"]["secretName"].is_string());
    for writable in [cfg.state.as_path(), cfg.cache_dir.as_path()] {
        let m = mount_of(writable);
        assert_ne!(m["readOnly"], true, "{} must be writable", writable.display());
        assert!(volume(m)["emptyDir"].is_object(), "{}", writable.display());
    }
    // The plugins: copied by an initContainer from the image into the plugin_dir volume.
    let plugins_mount = mount_of(&cfg.plugin_dir);
    assert!(volume(plugins_mount)["emptyDir"].is_object());
    let init = &pod["initContainers"][0];
    let command: Vec<&str> = init["command"].as_array().expect("command").iter().filter_map(Value::as_str).collect();
    assert!(command.iter().any(|c| c.starts_with("/usr/lib/steward/plugins")), "{command:?}");
    assert!(command.iter().any(|c| Path::new(c).starts_with(&cfg.plugin_dir)), "{command:?}");
    assert!(init["volumeMounts"].as_array().expect("init mounts").iter().any(|m| m["name"] == plugins_mount["name"]));

    // The Service selects the pods and reaches the named port.
    let service = find(&all, "Service");
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(&labels[k], v, "selector {k}");
    }
    assert_eq!(service["spec"]["ports"][0]["targetPort"], port["name"]);

    // The image puts things where the Deployment looks for them.
    let dockerfile = std::fs::read_to_string(repo_root().join("deploy/Dockerfile")).expect("deploy/Dockerfile");
    for want in [
        "FROM rust:1.95-slim-bookworm",
        "rustup target add wasm32-wasip2",
        "-p steward-plugin-build",
        "/usr/lib/steward/plugins/",
        "/usr/local/bin/steward",
        "USER 65532",
        r#"ENTRYPOINT ["steward"]"#,
        r#"CMD ["run", "--config", "/etc/steward/steward.yaml"]"#,
    ] {
        assert!(dockerfile.contains(want), "deploy/Dockerfile lacks {want}");
    }
    let dockerignore = std::fs::read_to_string(repo_root().join(".dockerignore")).expect(".dockerignore");
    assert!(dockerignore.lines().any(|l| l.trim() == "target/"), ".dockerignore must leave out target/");
}

/// What `steward rbac` prints is enough for a host, checked where RBAC is enforced: on the real
/// API server, the RBAC of a host config (its namespaces) is applied, and a host acting as its
/// ServiceAccount (impersonated) serves the bundled kinds: it holds its Lease, lists and watches,
/// writes finalizers, status and Events, creates and deletes a WorkflowRun, and finalizes.
/// Real API server only: the fake authorizes every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rbac_steward_rbac_prints_is_enough_for_a_host_on_a_real_api_server() {
    use std::time::Duration;

    use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};

    use crate::common::kube::{Kube, T, has_finalizer, mcp_ar, start, status, wait_obj};

    let Some(k) = Kube::real("rbac-least").await else { return };
    let packages: Vec<&str> = BUNDLED.iter().map(|(p, _)| *p).collect();
    k.install_crds(&packages).await;
    let (_dir, cfg) = k.host_dir(&packages, "");
    let name = format!("steward-{}", k.ns);
    let rbac = stdout_of({
        let mut c = steward();
        c.args(["rbac", "--namespace", &k.ns, "--service-account", "steward", "--name", &name, "-c"]).arg(&cfg);
        c
    });
    k.apply_yaml(&rbac).await;
    let as_steward = k.client_as_service_account("steward").await;
    // The impersonation is in force: what the role does not grant is refused.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(as_steward.clone());
    match crds.list(&Default::default()).await {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("the ServiceAccount could list CRDs, or failed otherwise: {other:?}"),
    }

    let engine = start(&cfg, as_steward).await;
    let ready =
        crate::common::eventually(T, "the host leads and has listed", async || engine.readiness(), Result::is_ok);
    ready.await.unwrap();
    let api = k.api(&mcp_ar());
    let bin = steward_plugin_build::example_mcp_server().unwrap_or_else(|e| panic!("{e}"));
    let mut o = DynamicObject::new("git", &mcp_ar()).within(&k.ns);
    o.data =
        json!({ "spec": { "type": "stdio", "command": bin.display().to_string(), "autoStart": true, "timeout": 10 } });
    api.create(&PostParams::default(), &o).await.unwrap();
    let running = wait_obj(&api, "git", "Running", |o| status(o)["state"] == "Running").await.unwrap();
    assert!(has_finalizer(&running), "{running:#?}");
    let events = crate::common::eventually(
        T,
        "an Event about git",
        async || k.events().await,
        |all| all.iter().any(|e| e["regarding"]["name"] == "git" && e["reportingController"] == "steward"),
    )
    .await;
    assert!(!events.is_empty());

    // A WorkflowRun the host creates itself, and deletes.
    let run = steward_sdk::RawObject {
        kind: "WorkflowRun".into(),
        name: "made".into(),
        namespace: k.ns.clone(),
        spec: json!({"workflow": "absent"}).to_string(),
        ..Default::default()
    };
    let key = engine.create_object(run).await.unwrap_or_else(|e| panic!("creating a WorkflowRun: {e}"));
    let runs = k.api(&ApiResource {
        group: "steward.dev".into(),
        version: "v1alpha1".into(),
        api_version: "steward.dev/v1alpha1".into(),
        kind: "WorkflowRun".into(),
        plural: "workflowruns".into(),
    });
    wait_obj(&runs, "made", "reconciled", |o| status(o)["phase"] == "Pending").await;
    engine.delete_object(&key).await.unwrap_or_else(|e| panic!("deleting a WorkflowRun: {e}"));
    wait_obj(&runs, "made", "gone (finalized)", |o| o.is_none()).await;

    api.delete("git", &DeleteParams::default()).await.unwrap();
    wait_obj(&api, "git", "finalized and gone", |o| o.is_none()).await;
    let metrics = engine.render_metrics();
    assert!(!metrics.contains("category=\"forbidden\""), "a write was forbidden:\n{metrics}");
    engine.shutdown(Duration::from_secs(5)).await;
}

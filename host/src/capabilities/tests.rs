//! Tests of the unit list, grants, linking and import checks.

use super::*;
use crate::plugin::{PluginSettings, Units, check_imports, linker, trap_ungranted_imports};

fn all() -> Units {
    units()
}

fn granting(caps: &[&str]) -> PluginSettings {
    PluginSettings { capabilities: caps.iter().map(|c| c.to_string()).collect(), ..Default::default() }
}

#[test]
fn unit_names_are_unique_and_base_is_always_granted() {
    let mut names: Vec<_> = UNITS.iter().map(|u| u.name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), UNITS.len());
    assert!(unit("base").is_some_and(|u| u.always_granted()));
    assert_eq!(grantable(), ["http", "services", "tools", "children"]);
}

#[test]
fn grants_in_config_are_checked_against_the_units() {
    assert!(check_grant("services").is_ok());
    let e = check_grant("network").unwrap_err();
    assert!(e.contains("unknown capability `network`") && e.contains("services"), "{e}");
    assert!(check_grant("base").unwrap_err().contains("always granted"));
}

#[test]
fn a_plugin_is_linked_with_exactly_its_granted_units() {
    let names = |s: &PluginSettings| all().granted(s).iter().map(|u| u.name()).collect::<Vec<_>>();
    assert_eq!(names(&granting(&[])), ["base"]);
    assert_eq!(names(&granting(&["services"])), ["base", "services"]);
    assert_eq!(all().base().iter().map(|u| u.name()).collect::<Vec<_>>(), ["base"]);
}

#[test]
fn every_import_maps_to_its_unit() {
    assert_eq!(all().for_import("steward:plugin/host@0.1.0").map(|u| u.name()), Some("base"));
    assert_eq!(all().for_import("steward:plugin/types@0.1.0").map(|u| u.name()), Some("base"));
    assert_eq!(all().for_import("wasi:io/streams@0.2.6").map(|u| u.name()), Some("base"));
    assert_eq!(all().for_import("steward:plugin/services@0.1.0").map(|u| u.name()), Some("services"));
    // wasi:http is the http unit's, though base provides the rest of wasi.
    assert_eq!(all().for_import("wasi:http/types@0.2.12").map(|u| u.name()), Some("http"));
    assert_eq!(all().for_import("steward:plugin/http@0.1.0").map(|u| u.name()), Some("http"));
    assert!(all().for_import("steward:plugin/nope@0.1.0").is_none());
}

#[test]
fn an_unknown_import_is_an_error_naming_the_interface() {
    let e = check_imports(all(), ["steward:plugin/host@0.1.0", "acme:spy/exfiltrate@1.0.0"]).unwrap_err();
    assert_eq!(e.interface, "acme:spy/exfiltrate@1.0.0");
    assert!(e.to_string().contains("acme:spy/exfiltrate@1.0.0"), "{e}");
}

#[test]
fn an_imported_capability_that_is_not_granted_is_ungranted_not_missing() {
    let c = check_imports(all(), ["steward:plugin/host@0.1.0", "steward:plugin/services@0.1.0"]).unwrap();
    assert!(c.imports("services"));
    // Imported though not declared: the plugin is not blocked; its calls into it fail.
    assert!(c.missing(&[], &granting(&[])).is_empty());
    assert_eq!(c.ungranted(&granting(&[])), ["services"]);
    assert!(c.ungranted(&granting(&["services"])).is_empty());
    assert!(c.unused(all(), "p", &[], &granting(&["services"])).is_empty());
    // What it may use: what it declares, and what it imports that is granted.
    assert!(c.usable(&[], &granting(&[])).is_empty());
    assert_eq!(c.usable(&[], &granting(&["services"])), ["services"]);
    assert_eq!(c.usable(&["tools".into()], &granting(&["services"])), ["tools", "services"]);
}

#[test]
fn a_declared_or_granted_capability_never_imported_is_a_warning() {
    let c = check_imports(all(), ["steward:plugin/host@0.1.0", "wasi:cli/stdout@0.2.0"]).unwrap();
    let declared = vec!["services".to_string()];
    let w = c.unused(all(), "p", &declared, &granting(&["services"]));
    assert_eq!(w.len(), 1);
    assert!(w[0].contains("declares capability `services`") && w[0].contains("steward:plugin/services@0.1.0"));
    let w = c.unused(all(), "p", &[], &granting(&["services"]));
    assert!(w[0].contains("plugins.p.capabilities grants `services`"), "{w:?}");
    // Declared and not granted is still missing (the plugin is blocked), whatever it imports.
    assert_eq!(c.missing(&declared, &granting(&[])), ["services"]);
}

/// The binary of a component whose only import is an instance named `name` exporting
/// `observed: func()` (the wrong type for the real `services.observed`, on purpose).
fn component_importing_observed(name: &str) -> Vec<u8> {
    let mut ty = vec![0x01, 0x42, 0x02, 0x01, 0x40, 0x00, 0x01, 0x00, 0x04, 0x00, 0x08];
    ty.extend_from_slice(b"observed");
    ty.extend_from_slice(&[0x01, 0x00]);
    let mut import = vec![0x01, 0x00, name.len() as u8];
    import.extend_from_slice(name.as_bytes());
    import.extend_from_slice(&[0x05, 0x00]);
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.push(0x07);
    bytes.push(ty.len() as u8);
    bytes.extend(ty);
    bytes.push(0x0a);
    bytes.push(import.len() as u8);
    bytes.extend(import);
    bytes
}

#[test]
fn linkers_hold_only_the_granted_units_imports() {
    let engine = wasmtime::Engine::new(wasmtime::Config::new().wasm_component_model(true)).unwrap();
    let bytes = component_importing_observed("steward:plugin/services@0.1.0");
    let component = wasmtime::component::Component::new(&engine, &bytes).unwrap();
    let base = linker(&engine, &all().base()).unwrap();
    let err = format!("{:#}", base.instantiate_pre(&component).map(|_| ()).unwrap_err());
    assert!(err.contains("implementation is missing"), "the base linker has no services import: {err}");
    // The services linker has the function (of another type than this component expects).
    let full = linker(&engine, &all().granted(&granting(&["services"]))).unwrap();
    let err = format!("{:#}", full.instantiate_pre(&component).map(|_| ()).unwrap_err());
    assert!(!err.contains("implementation is missing"), "{err}");
}

#[test]
fn ungranted_imports_can_be_linked_to_traps_without_granting_them() {
    let engine = wasmtime::Engine::new(wasmtime::Config::new().wasm_component_model(true)).unwrap();
    let component =
        wasmtime::component::Component::new(&engine, component_importing_observed("steward:plugin/services@0.1.0"))
            .unwrap();
    let mut base = linker(&engine, &all().base()).unwrap();
    trap_ungranted_imports(all(), &mut base, &engine, &component, &all().base()).unwrap();
    base.instantiate_pre(&component).expect("the services import is stubbed");
}

#[test]
fn what_the_cluster_must_allow_is_the_union_of_what_each_used_unit_needs() {
    use crate::objects::ObjectKind;
    let mut child_owner = granting(&["children"]);
    child_owner
        .sections
        .insert("children", ChildrenSettings { kinds: vec!["v1/ConfigMap".into(), "apps/v1/Deployment".into()] });
    let mut other = granting(&["children"]);
    other.sections.insert("children", ChildrenSettings { kinds: vec!["v1/ConfigMap".into()] });
    let plain = granting(&[]);
    // Nobody uses services or children: nothing beyond the host's own.
    assert_eq!(access(&[(vec![], &plain)]), Access::default());
    // Children of the kinds granted to the plugins that use the unit, each once; a plugin that
    // does not use the unit adds nothing, whatever its settings hold.
    let a =
        access(&[(vec!["children".into()], &child_owner), (vec!["children".into()], &other), (vec![], &child_owner)]);
    assert_eq!(a.manage, [ObjectKind::new("apps/v1", "Deployment"), ObjectKind::new("v1", "ConfigMap")]);
    assert!(!a.read_secrets);
    // Services read secrets.
    let a = access(&[(vec!["services".into()], &plain)]);
    assert!(a.read_secrets && a.manage.is_empty());
}

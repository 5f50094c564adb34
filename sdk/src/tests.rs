//! Tests of the SDK's dispatch: how contract calls map onto a `Kind`.

use serde_json::json;

use crate::prelude::*;
use crate::testing::{FakeHost, Read, object};
use crate::{dispatch::KindEntry, dispatch::PluginEntry};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Spec {
    /// How many.
    count: u32,
    #[serde(default)]
    #[allow(dead_code)]
    inner: Inner,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Inner {
    #[serde(default)]
    #[allow(dead_code)]
    flag: bool,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Status {
    seen: u32,
    peers: usize,
}

struct Counter;

impl Kind for Counter {
    type Spec = Spec;
    type Status = Status;
    const GROUP: &'static str = "test.dev";
    const VERSION: &'static str = "v1";
    const KIND: &'static str = "Counter";
    const PLURAL: &'static str = "counters";
    const RESYNC_SECONDS: u32 = 60;

    fn validate(obj: &Object<Spec, Status>) -> Vec<FieldError> {
        if obj.spec.count > 10 { vec![FieldError::new("spec.count", "must be at most 10")] } else { vec![] }
    }

    fn reconcile(ctx: &Context, obj: &Object<Spec, Status>) -> Result<Outcome<Status>, Error> {
        let peers = ctx.list("Counter", Some(&obj.namespace)).len();
        if obj.spec.count == 0 {
            return Err(Error::retry("zero"));
        }
        Ok(Outcome::status(Status { seen: obj.spec.count, peers }))
    }
}

fn entry() -> PluginEntry {
    PluginEntry {
        name: "counter",
        version: "1.0.0",
        capabilities: &["services"],
        kinds: vec![KindEntry::of::<Counter>()],
        world: None,
    }
}

#[test]
fn describe_carries_kind_metadata_and_an_inlined_schema() {
    let info = entry().info();
    assert_eq!((info.name.as_str(), info.version.as_str()), ("counter", "1.0.0"));
    assert_eq!(info.capabilities, vec!["services"]);
    let k = &info.kinds[0];
    assert_eq!((k.kind.as_str(), k.plural.as_str(), k.resync_seconds, k.namespaced), ("Counter", "counters", 60, true));
    let schema: serde_json::Value = serde_json::from_str(&k.spec_schema).unwrap();
    assert_eq!(schema["properties"]["count"]["type"], "integer");
    assert_eq!(schema["properties"]["count"]["description"], "How many.");
    assert!(schema["properties"]["inner"]["properties"]["flag"].is_object(), "subschemas are inlined: {schema}");
    assert!(!k.spec_schema.contains("$ref") && schema.get("$schema").is_none());
}

#[test]
fn spec_errors_carry_the_field_path() {
    let errs = entry().validate(&object("Counter", "a", json!({"count": "three"})));
    assert_eq!(errs[0].path, "spec.count");
    let errs = entry().validate(&object("Counter", "a", json!({"count": 1, "inner": {"flg": true}})));
    assert_eq!(errs[0].path, "spec.inner.flg");
    let errs = entry().validate(&object("Counter", "a", json!({"count": 11})));
    assert_eq!(errs, vec![FieldError::new("spec.count", "must be at most 10")]);
    assert!(entry().validate(&object("Counter", "a", json!({"count": 3}))).is_empty());
}

#[test]
fn reconcile_validates_first_and_serializes_the_status() {
    let host = FakeHost::new().with(object("Counter", "other", json!({"count": 1})));
    let p = entry();
    let err = p.reconcile(&host, &object("Counter", "a", json!({"count": 11})), &[], false).unwrap_err();
    assert!(matches!(err, Error::Invalid(ref e) if e[0].path == "spec.count"), "{err}");
    assert_eq!(p.reconcile(&host, &object("Counter", "a", json!({"count": 0})), &[], false), Err(Error::retry("zero")));
    let out = p.reconcile(&host, &object("Counter", "a", json!({"count": 2})), &[], false).unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&out.status).unwrap(), json!({"seen": 2, "peers": 1}));
    assert_eq!(host.reads(), vec![Read::List { kind: "Counter".into(), namespace: Some("default".into()) }; 2]);
}

#[test]
fn finalize_keeps_the_last_status_even_for_a_broken_spec() {
    let mut obj = object("Counter", "a", json!({"count": "broken"}));
    obj.status = Some("{\"seen\":1,\"peers\":0}".into());
    obj.deleting = true;
    let out = entry().reconcile(&FakeHost::new(), &obj, &[], true).unwrap();
    assert_eq!(out.status, "{\"seen\":1,\"peers\":0}");
    assert!(out.services.is_empty());
}

#[test]
fn an_unknown_kind_is_a_fatal_error_naming_the_kinds_it_has() {
    let err = entry().reconcile(&FakeHost::new(), &object("Other", "a", json!({})), &[], false).unwrap_err();
    assert_eq!(err, Error::fatal("plugin counter does not reconcile kind Other (it has: Counter)"));
}

#[test]
fn a_status_that_no_longer_parses_is_none_not_an_error() {
    let mut obj = object("Counter", "a", json!({"count": 1}));
    obj.status = Some("{\"old\": true}".into());
    let typed = crate::dispatch::typed::<Counter>(&obj).unwrap();
    assert_eq!(typed.status, None);
}

#[test]
fn a_spec_that_is_not_a_mapping_is_invalid_at_spec() {
    // serde would read a list into a struct field by field; a spec is always a mapping.
    for (text, found) in [("[3]", "a list"), ("\"x\"", "a string"), ("null", "null"), ("7", "a number")] {
        let mut obj = object("Counter", "c", json!({}));
        obj.spec = text.into();
        let errs = crate::testing::validate::<Counter>(&obj);
        assert_eq!(errs.len(), 1, "{text}: {errs:?}");
        assert_eq!(errs[0].path, "spec");
        assert!(errs[0].message.ends_with(found), "{text}: {}", errs[0].message);
    }
}

#[test]
fn a_wrong_type_names_its_field_without_a_position_in_the_json_text() {
    let errs = crate::testing::validate::<Counter>(&object("Counter", "c", json!({"count": "seven"})));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].path, "spec.count");
    assert!(errs[0].message.starts_with("invalid type: string \"seven\""), "{}", errs[0].message);
    assert!(!errs[0].message.contains("line"), "the JSON text is not the user's file: {}", errs[0].message);
}

mod world {
    use std::time::Duration;

    use serde_json::json;

    use crate::prelude::*;
    use crate::testing::{FakeHost, TopologyBuilder, first_round, object, reconcile_world};
    use crate::world::{Observed, RawObjectOutcome, WorldEntry};
    use crate::{Link, LinkBy, ObjectRef, Round, RoundContext, World, WorldAnswer, WorldInfo};
    use crate::{dispatch::KindEntry, dispatch::PluginEntry};

    use super::Counter;

    /// Counts, for each Counter, the Widgets that point at it (`spec.counter`); a Counter named
    /// `keep` keeps its status, one named `slow` asks for a round in 5 s, and a round with a
    /// Widget named `stray` answers for that Widget (not an own object).
    struct Tally;

    impl World for Tally {
        fn info() -> WorldInfo {
            WorldInfo::new(["Widget"])
                .link(Link::new("counts", "Widget", "Counter", LinkBy::Field("spec.counter".into())))
                .with_namespaces()
        }

        fn reconcile(ctx: &RoundContext, round: &Round) -> Result<WorldAnswer, Error> {
            let t = &round.topology;
            let mut answer = WorldAnswer::new();
            for id in t.of_kind("Counter") {
                let r = t.object_ref(id).unwrap();
                let seen = ctx.observed(&r).map_or(0, |o| o.children.len());
                let outcome = match r.name.as_str() {
                    "keep" => Outcome::keep_status(),
                    "slow" => Outcome::status(json!({"widgets": 0})).requeue_after(Duration::from_secs(5)),
                    _ => Outcome::status(json!({"widgets": t.children(id, &["counts"]).len(), "seen": seen})),
                };
                answer.outcome(r, outcome);
            }
            if let Some(stray) = t.node(&ObjectRef::new("Widget", "default", "stray")) {
                answer.outcome(t.object_ref(stray).unwrap(), Outcome::status(json!({})));
            }
            answer.requeue_after(Duration::from_secs(60));
            Ok(answer)
        }
    }

    fn entry() -> PluginEntry {
        PluginEntry {
            name: "tally",
            version: "1.0.0",
            capabilities: &[],
            kinds: vec![KindEntry::of::<Counter>()],
            world: Some(WorldEntry::of::<Tally>()),
        }
    }

    fn round(widgets: &[&str]) -> Round {
        let counter = ObjectRef::new("Counter", "default", "c");
        let mut keep = object("Counter", "keep", json!({"count": 1}));
        keep.status = Some("{\"widgets\":7}".into());
        let mut b = TopologyBuilder::new()
            .object(object("Counter", "c", json!({"count": 1})))
            .object(keep)
            .object(object("Counter", "slow", json!({"count": 1})))
            .with_namespaces();
        for w in widgets {
            b = b.object(object("Widget", w, json!({"counter": "c"}))).edge(
                "counts",
                &ObjectRef::new("Widget", "default", *w),
                &counter,
            );
        }
        first_round(b.build().unwrap())
    }

    #[test]
    fn a_world_plugin_refuses_to_reconcile_one_object() {
        let err = entry().reconcile(&FakeHost::new(), &object("Counter", "a", json!({"count": 1})), &[], false);
        assert!(matches!(&err, Err(Error::Fatal(m)) if m.contains("world rounds")), "{err:?}");
    }

    #[test]
    fn a_round_serializes_statuses_keeps_the_last_one_and_takes_the_shortest_requeue() {
        let answer = entry().reconcile_world(&FakeHost::new(), &round(&["w1", "w2"])).unwrap();
        let status = |name: &str| -> serde_json::Value {
            let o: &RawObjectOutcome = answer.outcomes.iter().find(|o| o.object.name == name).unwrap();
            serde_json::from_str(&o.result.as_ref().unwrap().status).unwrap()
        };
        assert_eq!(status("c"), json!({"widgets": 2, "seen": 0}));
        assert_eq!(status("keep"), json!({"widgets": 7}), "keep_status is the node's last status");
        assert_eq!(answer.requeue_after_ms, Some(5_000));
    }

    #[test]
    fn an_answer_for_an_object_that_is_not_own_fails_the_round() {
        let err = entry().reconcile_world(&FakeHost::new(), &round(&["stray"])).unwrap_err();
        assert!(matches!(&err, Error::Fatal(m) if m.contains("Widget default/stray")), "{err}");
        let err = reconcile_world::<Tally>(&FakeHost::new(), &round(&["stray"]), &["Counter"]).unwrap_err();
        assert!(matches!(&err, Error::Fatal(m) if m.contains("Widget default/stray")), "{err}");
    }

    #[test]
    fn observed_reads_what_the_host_holds_for_the_object_acted_for() {
        let host = FakeHost::new();
        let c = ObjectRef::new("Counter", "default", "c");
        let child =
            ObservedChild { api_version: "v1".into(), kind: "ConfigMap".into(), name: "x".into(), object: None };
        host.set_observed(c.clone(), Observed { children: vec![child], ..Observed::default() });
        let answer = reconcile_world::<Tally>(&host, &round(&[]), &["Counter"]).unwrap();
        let got = answer.get(&c).unwrap().as_ref().unwrap();
        assert_eq!(got.status, Some(json!({"widgets": 0, "seen": 1})));
        // Only the round's own objects can be acted for.
        assert!(!crate::context::Host::act_for(&host, &ObjectRef::new("Widget", "default", "w")));
        assert_eq!(host.acting_for(), Some(ObjectRef::new("Counter", "default", "slow")));
    }

    #[test]
    fn namespace_nodes_link_every_namespaced_object() {
        let r = round(&["w1"]);
        let t = &r.topology;
        let ns = t.node(&ObjectRef::new("Namespace", "", "default")).unwrap();
        assert_eq!(t.children(ns, &["namespace"]).len(), 4);
        assert!(r.first && r.changes.len() == 5);
        let w = t.node(&ObjectRef::new("Widget", "default", "w1")).unwrap();
        assert_eq!(t.paths_to_roots(w, &[]).unwrap().len(), 2, "w1 -> c -> default and w1 -> default");
        assert_eq!(entry().world.as_ref().map(|w| (w.info)().links.len()), Some(1));
    }
}

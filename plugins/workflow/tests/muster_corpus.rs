//! The Workflow files of `testing/muster-compat`, through the plugin's validation and warnings.

#[path = "../../../testing/muster-compat/verdicts.rs"]
mod verdicts;

#[test]
fn every_muster_workflow_gets_musters_verdict() {
    let (checked, wrong) = verdicts::differences::<workflow::Workflow>(&["workflow"]);
    assert!(checked >= 25, "only {checked} Workflow cases");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

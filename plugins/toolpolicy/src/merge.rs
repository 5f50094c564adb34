//! The merge: which policy's rules are in force for one MCPServer.
//!
//! Every ToolPolicy attached along a server's paths takes part: those that target the server,
//! those that target an MCPServerGroup the server is a member of (any number of groups), and
//! those that target the server's namespace. Their levels, least specific first:
//! `Namespace` < `MCPServerGroup` < `MCPServer`.
//!
//! 1. **Overrides first.** When any attached policy has `overrides`, the rules in force are the
//!    `overrides` of the *least* specific level that has any.
//! 2. **Else defaults.** Otherwise they are the `defaults` of the *most* specific level that has
//!    any.
//! 3. **Otherwise nothing**: every tool is allowed (as without any policy).
//!
//! Merging is atomic per policy: the rules in force are exactly one policy's block (its whole
//! `allow` and `deny`), never a union of lists. A tool is then denied when it matches a `deny`
//! glob, else allowed when `allow` is empty or it matches an `allow` glob.
//!
//! **Conflicts.** When the deciding level holds more than one candidate block and they are not
//! all equal (two policies on one object, or a server in two groups whose policies disagree),
//! the candidate of the policy first by name wins, so the result is deterministic, and the
//! decision reports a conflict naming every candidate. Equal blocks do not conflict. Only the
//! deciding level is checked: a disagreement that an override above makes moot is no conflict.

use crate::spec::{Rules, TargetKind};

/// One policy attached along a server's paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attached {
    /// The ToolPolicy's name (policies live in the server's namespace).
    pub policy: String,
    /// What it attaches to.
    pub level: TargetKind,
    /// Its `defaults`.
    pub defaults: Option<Rules>,
    /// Its `overrides`.
    pub overrides: Option<Rules>,
}

/// Which block of a policy is in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// Its `defaults`.
    Defaults,
    /// Its `overrides`.
    Overrides,
}

impl Block {
    /// `defaults` or `overrides`, as the spec spells them.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Defaults => "defaults",
            Self::Overrides => "overrides",
        }
    }
}

/// The rules in force for one server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The rules, and whose: `None` when no attached policy has a block (every tool allowed).
    pub winner: Option<Winner>,
    /// The candidates of the deciding level, by policy name, when they disagree.
    pub conflict: Vec<String>,
}

/// The policy whose block is in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Winner {
    /// Its name.
    pub policy: String,
    /// Which block.
    pub block: Block,
    /// Its level.
    pub level: TargetKind,
    /// The rules.
    pub rules: Rules,
}

/// Decides the rules in force from the policies `attached` along one server's paths.
pub fn decide(attached: &[Attached]) -> Decision {
    let overrides: Vec<(&Attached, &Rules)> =
        attached.iter().filter_map(|a| a.overrides.as_ref().map(|r| (a, r))).collect();
    if let Some(level) = overrides.iter().map(|(a, _)| a.level).min() {
        return pick(&overrides, level, Block::Overrides);
    }
    let defaults: Vec<(&Attached, &Rules)> =
        attached.iter().filter_map(|a| a.defaults.as_ref().map(|r| (a, r))).collect();
    match defaults.iter().map(|(a, _)| a.level).max() {
        Some(level) => pick(&defaults, level, Block::Defaults),
        None => Decision { winner: None, conflict: Vec::new() },
    }
}

fn pick(candidates: &[(&Attached, &Rules)], level: TargetKind, block: Block) -> Decision {
    let mut at: Vec<&(&Attached, &Rules)> = candidates.iter().filter(|(a, _)| a.level == level).collect();
    at.sort_by(|x, y| x.0.policy.cmp(&y.0.policy));
    at.dedup_by(|x, y| x.0.policy == y.0.policy);
    let (first, rules) = at[0];
    let conflict = if at.iter().all(|(_, r)| *r == *rules) {
        Vec::new()
    } else {
        at.iter().map(|(a, _)| a.policy.clone()).collect()
    };
    Decision { winner: Some(Winner { policy: first.policy.clone(), block, level, rules: (*rules).clone() }), conflict }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TargetKind::{McpServer as S, McpServerGroup as G, Namespace as N};

    fn rules(deny: &[&str]) -> Option<Rules> {
        Some(Rules { allow: vec![], deny: deny.iter().map(|s| s.to_string()).collect() })
    }

    fn p(name: &str, level: TargetKind, defaults: Option<Rules>, overrides: Option<Rules>) -> Attached {
        Attached { policy: name.into(), level, defaults, overrides }
    }

    /// What a case is called, the attached policies, the winner's name and block, the conflict.
    type Case = (&'static str, Vec<Attached>, Option<(&'static str, Block)>, Vec<&'static str>);

    #[test]
    fn the_merge_table() {
        let cases: Vec<Case> = vec![
            ("nothing attached", vec![], None, vec![]),
            ("a policy without blocks", vec![p("a", S, None, None)], None, vec![]),
            (
                "the most specific defaults win",
                vec![
                    p("ns", N, rules(&["a"]), None),
                    p("grp", G, rules(&["b"]), None),
                    p("srv", S, rules(&["c"]), None),
                ],
                Some(("srv", Block::Defaults)),
                vec![],
            ),
            (
                "group defaults over namespace defaults",
                vec![p("ns", N, rules(&["a"]), None), p("grp", G, rules(&["b"]), None)],
                Some(("grp", Block::Defaults)),
                vec![],
            ),
            (
                "the least specific overrides win over everything",
                vec![
                    p("ns", N, None, rules(&["*"])),
                    p("grp", G, None, rules(&["b"])),
                    p("srv", S, rules(&["c"]), None),
                ],
                Some(("ns", Block::Overrides)),
                vec![],
            ),
            (
                "a server's overrides beat every defaults",
                vec![p("ns", N, rules(&["a"]), None), p("srv", S, None, rules(&["c"]))],
                Some(("srv", Block::Overrides)),
                vec![],
            ),
            (
                "one policy with both: its overrides",
                vec![p("grp", G, rules(&["a"]), rules(&["b"])), p("srv", S, rules(&["c"]), None)],
                Some(("grp", Block::Overrides)),
                vec![],
            ),
            (
                "two server defaults that disagree: the first by name, a conflict",
                vec![p("zeta", S, rules(&["a"]), None), p("alpha", S, rules(&["b"]), None)],
                Some(("alpha", Block::Defaults)),
                vec!["alpha", "zeta"],
            ),
            (
                "two server defaults that agree: no conflict",
                vec![p("zeta", S, rules(&["a"]), None), p("alpha", S, rules(&["a"]), None)],
                Some(("alpha", Block::Defaults)),
                vec![],
            ),
            (
                "a server in two groups whose defaults disagree",
                vec![
                    p("g1-pol", G, rules(&["a"]), None),
                    p("g2-pol", G, rules(&["b"]), None),
                    p("ns", N, rules(&["x"]), None),
                ],
                Some(("g1-pol", Block::Defaults)),
                vec!["g1-pol", "g2-pol"],
            ),
            (
                "a disagreement below a namespace override is moot",
                vec![p("a", S, rules(&["a"]), None), p("b", S, rules(&["b"]), None), p("ns", N, None, rules(&["x"]))],
                Some(("ns", Block::Overrides)),
                vec![],
            ),
        ];
        for (what, attached, want, conflict) in cases {
            let d = decide(&attached);
            assert_eq!(d.winner.as_ref().map(|w| (w.policy.as_str(), w.block)), want, "{what}");
            assert_eq!(d.conflict, conflict, "{what}");
        }
    }

    #[test]
    fn the_rules_in_force_are_the_winners_whole_block() {
        let d = decide(&[
            p("ns", N, Some(Rules { allow: vec!["x_*".into()], deny: vec!["x_a".into()] }), None),
            p("srv", S, rules(&["x_b"]), None),
        ]);
        let w = d.winner.unwrap();
        assert_eq!(w.rules, Rules { allow: vec![], deny: vec!["x_b".into()] }, "not a union with the namespace's");
        assert!(w.rules.allows("x_a") && !w.rules.allows("x_b"));
        assert_eq!(w.level, S);
    }
}

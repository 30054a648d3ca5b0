//! Helpers shared by the crate's unit tests.

use proptest::prelude::*;

use crate::builder::MirBuilder;
use crate::model::{Access, Destination, Missing, RootKind, Scope};
use crate::resolved::ResolvedRule;

#[cfg(unix)]
pub(crate) use terra_test_support::dirs::canonical_tempdir as tmp;

/// A resolved host rule (see [`ResolvedRule::host`]).
pub(crate) fn r(access: Access, scope: Scope, path: &str) -> ResolvedRule {
    ResolvedRule::host(access, scope, path)
}

/// Any host rule on a path of up to four components, each one of `segments`.
pub(crate) fn arb_rule(segments: &'static [&'static str]) -> impl Strategy<Value = ResolvedRule> {
    (
        prop_oneof![
            Just(Access::Read),
            Just(Access::Write),
            Just(Access::Deny),
            Just(Access::DenyWrite)
        ],
        prop_oneof![Just(Scope::Exact), Just(Scope::Tree)],
        proptest::collection::vec(proptest::sample::select(segments), 0..=4),
    )
        .prop_map(|(access, scope, segs)| r(access, scope, &format!("/{}", segs.join("/"))))
}

/// Adds a tree rule below the workspace.
pub(crate) fn ws_tree(b: &mut MirBuilder, access: Access, path: &str, missing: Missing) {
    b.add_rule(access, RootKind::Workspace, path, Scope::Tree, missing)
        .unwrap();
}

/// Adds a tree rule on an absolute host path.
pub(crate) fn host_tree(b: &mut MirBuilder, access: Access, path: &str, missing: Missing) {
    b.add_rule(access, RootKind::Host, path, Scope::Tree, missing)
        .unwrap();
}

/// A destination as the builder stores it.
pub(crate) fn dest(host: &str, port: u16, require_tls_sni: bool, private: bool) -> Destination {
    Destination {
        host: host.into(),
        port,
        require_tls_sni,
        allow_private_addresses: private,
    }
}

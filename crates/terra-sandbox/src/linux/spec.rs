//! What one box is made from: [`BoxConfig`] with its plan reduced to the
//! parts the launcher lowers. Public only with the `test-support` feature.

use terra_policy::{NetworkMode, ResolvedRule, RootMode, SandboxPlan};

use super::BoxConfig;

/// The parts of a plan the launcher lowers; `spawn_box` builds it from the
/// checked plan, the tests (feature `test-support`) from hand-made rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanView {
    pub rules: Vec<ResolvedRule>,
    pub network: NetworkMode,
    pub root_mode: RootMode,
}

impl PlanView {
    pub fn of(plan: &SandboxPlan) -> PlanView {
        PlanView {
            rules: plan.rules().to_vec(),
            network: plan.network(),
            root_mode: plan.root_mode(),
        }
    }
}

/// [`BoxConfig`] over a [`PlanView`]. Callers must take the rules from a
/// resolved, capability-checked plan; `spawn_box` does exactly that, and only
/// the tests (feature `test-support`) make one by hand.
pub type BoxSpec = BoxConfig<PlanView>;

impl From<BoxConfig> for BoxSpec {
    fn from(c: BoxConfig) -> BoxSpec {
        let view = PlanView::of(&c.plan);
        c.with_plan(view)
    }
}

//! What one box is made from: [`BoxConfig`] with its plan reduced to the
//! parts the launcher lowers. Public only with the `test-support` feature.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use terra_policy::{NetworkMode, ResolvedRule, RootMode, SandboxPlan};

use super::{BoxConfig, BoxService};

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
pub struct BoxSpec {
    pub plan: PlanView,
    pub argv: Vec<OsString>,
    pub cwd: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    pub temp_dir: PathBuf,
    pub canary_path: PathBuf,
    pub canary_tcp: Option<SocketAddr>,
    pub canary_gate: Option<OwnedFd>,
    pub mediated: Option<(OwnedFd, SocketAddr, BoxService)>,
    pub hostname: String,
}

impl From<BoxConfig> for BoxSpec {
    fn from(c: BoxConfig) -> BoxSpec {
        BoxSpec {
            plan: PlanView::of(&c.plan),
            argv: c.argv,
            cwd: c.cwd,
            env: c.env,
            temp_dir: c.temp_dir,
            canary_path: c.canary_path,
            canary_tcp: c.canary_tcp,
            canary_gate: c.canary_gate,
            mediated: c.mediated,
            hostname: c.hostname,
        }
    }
}

//! The activation check: after the profile is applied, every probe of
//! `terra_seatbelt::probes` must fail with a permission error (EPERM or
//! EACCES), except the one that must succeed (a mediated workload reaching
//! the broker's port). Any other outcome refuses the launch: the role does
//! not run under a profile that was not seen to hold.

use std::fs::File;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use terra_seatbelt::Probe;

use super::error::LaunchError;

/// The canary must open before confinement (it exists and is readable).
pub fn canary_opens_now(canary: &str) -> Result<(), LaunchError> {
    File::open(canary)
        .map(drop)
        .map_err(|error| LaunchError::CanaryClosed {
            canary: canary.to_string(),
            error,
        })
}

fn denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

pub fn check(probes: &[Probe]) -> Result<(), LaunchError> {
    for p in probes {
        let outcome = match p {
            Probe::OpenCanary(path) => File::open(path).map(drop),
            Probe::Connect(addr) | Probe::ReachBroker(addr) => {
                TcpStream::connect_timeout(addr, Duration::from_secs(2)).map(drop)
            }
            Probe::Listen(addr) => TcpListener::bind(addr).map(drop),
        };
        let probe = format!("{p:?}");
        match (p.must_succeed(), outcome) {
            (true, Ok(())) => {}
            (true, Err(error)) => return Err(LaunchError::Unreachable { probe, error }),
            (false, Err(e)) if denied(&e) => {}
            (false, Ok(())) => return Err(LaunchError::Allowed { probe }),
            (false, Err(error)) => return Err(LaunchError::NotDenied { probe, error }),
        }
    }
    Ok(())
}

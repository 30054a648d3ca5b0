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

/// The canary must open before confinement (it exists and is readable).
pub fn canary_opens_now(canary: &str) -> Result<(), String> {
    File::open(canary).map(drop).map_err(|e| {
        format!("activation check: the canary {canary} must open before confinement: {e}")
    })
}

fn denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

pub fn check(probes: &[Probe]) -> Result<(), String> {
    for p in probes {
        let outcome = match p {
            Probe::OpenCanary(path) => File::open(path).map(drop),
            Probe::Connect(addr) => {
                TcpStream::connect_timeout(addr, Duration::from_secs(2)).map(drop)
            }
            Probe::Listen(addr) => TcpListener::bind(addr).map(drop),
            Probe::ReachBroker(addr) => {
                TcpStream::connect_timeout(addr, Duration::from_secs(2)).map(drop)
            }
        };
        if p.must_succeed() {
            match outcome {
                Ok(()) => continue,
                Err(e) => {
                    return Err(ActivationError::Unreachable {
                        probe: format!("{p:?}"),
                        error: e,
                    })
                }
            }
        }
        match outcome {
            Err(e) if denied(&e) => {}
            Ok(()) => {
                return Err(format!(
                    "activation check: {p:?} succeeded under the profile"
                ))
            }
            Err(e) => {
                return Err(format!(
                    "activation check: {p:?} failed with {e}, not with a permission error"
                ))
            }
        }
    }
    Ok(())
}

//! The host's TSC frequency, measured: the guest kernel under QEMU's
//! microvm cannot always calibrate it (no PIT, no HPET) and then stalls;
//! `tsc_early_khz` tells it.

/// rdtsc against CLOCK_MONOTONIC_RAW over 20 ms, in kHz (x86_64 only).
#[cfg(target_arch = "x86_64")]
pub fn measure_khz() -> Option<u64> {
    use std::time::Instant;
    let read = || {
        // SAFETY: rdtsc has no preconditions on x86_64; it reads a counter.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    };
    let t0 = Instant::now();
    let c0 = read();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let c1 = read();
    let ns = t0.elapsed().as_nanos() as u64;
    if ns == 0 || c1 <= c0 {
        return None;
    }
    let khz = (c1 - c0).saturating_mul(1_000_000) / ns;
    // Round to 10 kHz: the measurement is not finer than that.
    Some((khz + 5) / 10 * 10).filter(|k| *k > 0)
}

#[cfg(not(target_arch = "x86_64"))]
pub fn measure_khz() -> Option<u64> {
    None
}

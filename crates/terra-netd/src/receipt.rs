//! The network receipt: one JSON line per connection attempt.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// One connection attempt, as written to the receipt.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Attempt {
    /// When the attempt started, RFC 3339 UTC with milliseconds.
    pub time: String,
    /// "http-connect", "http", "socks5", "unknown" (the proxy), "tcp",
    /// "udp" (a workload's own connect()) or "dns" (the box's DNS stub).
    pub protocol: &'static str,
    /// "relay": the broker carried the bytes (the proxy); "handoff": the
    /// broker connected and handed the socket to the workload, it never saw
    /// a byte (so `bytes_up`/`bytes_down` are 0); "dns-stub": a stub question.
    pub path: &'static str,
    /// The requested name, as the client wrote it (None when unparsed).
    pub name: Option<String>,
    pub port: Option<u16>,
    /// The TLS server name, when the broker read a ClientHello.
    pub sni: Option<String>,
    /// Every address the name resolved to.
    pub resolved: Vec<IpAddr>,
    /// The address the broker connected to.
    pub address: Option<SocketAddr>,
    /// "allowed" or "refused".
    pub verdict: &'static str,
    /// The refusal reason (contract name or operational reason).
    pub reason: Option<&'static str>,
    /// Human detail (parse error, resolver error, ...).
    pub detail: Option<String>,
    /// Bytes from the client to the destination (replayed bytes included).
    pub bytes_up: u64,
    /// Bytes from the destination to the client.
    pub bytes_down: u64,
    pub duration_ms: u64,
}

impl Attempt {
    /// An attempt that started at `time`: refused, nothing known yet.
    pub fn started(time: SystemTime, protocol: &'static str) -> Attempt {
        Attempt {
            time: rfc3339(time),
            protocol,
            path: "relay",
            name: None,
            port: None,
            sni: None,
            resolved: Vec::new(),
            address: None,
            verdict: "refused",
            reason: None,
            detail: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
        }
    }
}

/// Where attempts go: a shared, line-atomic writer.
#[derive(Clone)]
pub struct ReceiptSink {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl ReceiptSink {
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        ReceiptSink {
            out: Arc::new(Mutex::new(out)),
        }
    }

    /// Discards every attempt.
    pub fn discard() -> Self {
        ReceiptSink::new(Box::new(std::io::sink()))
    }

    /// Appends one line; write errors are logged, never fatal.
    pub fn record(&self, attempt: &Attempt) {
        let mut line = match serde_json::to_vec(attempt) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("receipt: cannot serialize attempt: {e}");
                return;
            }
        };
        line.push(b'\n');
        let mut out = match self.out.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Err(e) = out.write_all(&line).and_then(|()| out.flush()) {
            tracing::warn!("receipt: write failed: {e}");
        }
    }
}

/// A shared in-memory receipt (tests and benches).
#[derive(Clone, Default)]
pub struct MemoryReceipt(pub Arc<Mutex<Vec<u8>>>);

impl Write for MemoryReceipt {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("receipt lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl MemoryReceipt {
    /// Every line written so far, parsed.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        let data = self.0.lock().expect("receipt lock").clone();
        String::from_utf8(data)
            .expect("receipt is UTF-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("receipt line is JSON"))
            .collect()
    }
}

/// `t` as RFC 3339 UTC with milliseconds, e.g. `2026-12-01T22:05:40.123Z`
/// (also the run receipt's format: terra-supervisor re-exports it).
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 -> (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn time_format() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_782_400_000 + 1); // 2000-02-29
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.001Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_782_400_500);
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.500Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_083_199);
        assert_eq!(rfc3339(t), "2026-11-30T23:59:59.000Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_796_162_722);
        assert_eq!(rfc3339(t), "2026-12-01T22:05:22.000Z");
        // Before the epoch (a clock set back): the epoch, not a panic.
        let t = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(rfc3339(t), "1970-01-01T00:00:00.000Z");
    }
}

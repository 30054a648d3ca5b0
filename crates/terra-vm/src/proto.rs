//! The control protocol between the host side of the vm backend (`terra
//! __vm`, outside the guest) and terra as the guest's init, over one
//! virtio-serial port.
//!
//! A frame is a one-byte kind, a 4-byte little-endian payload length and the
//! payload. The decoder checks the kind and the length against that kind's
//! limit before it allocates anything, and refuses (it never skips) a frame
//! it does not understand: the stream is then unusable and the run ends.
//!
//! | kind | direction | payload |
//! |---|---|---|
//! | 1 `Config` | host -> guest | JSON [`GuestConfig`] (at most 4 MiB) |
//! | 2 `Stdin` | host -> guest | bytes (at most 64 KiB) |
//! | 3 `StdinEof` | host -> guest | empty |
//! | 4 `Signal` | host -> guest | i32 LE |
//! | 5 `WindowSize` | host -> guest | rows u16 LE, cols u16 LE |
//! | 64 `Ready` | guest -> host | empty: the guest's init reached the channel |
//! | 65 `Activation` | guest -> host | UTF-8: "passed" or why it failed |
//! | 66 `Refused` | guest -> host | UTF-8: why the workload was not started |
//! | 67 `ExecFailed` | guest -> host | i32 LE code (126, 127), UTF-8 reason |
//! | 68 `Stdout` | guest -> host | bytes (at most 64 KiB) |
//! | 69 `Stderr` | guest -> host | bytes (at most 64 KiB) |
//! | 70 `Exit` | guest -> host | u8 signaled (0, 1), i32 LE code or signal |

use serde::{Deserialize, Serialize};

/// Largest data payload (stdin, stdout, stderr) in one frame.
pub const MAX_DATA: usize = 64 * 1024;
/// Largest configuration payload.
pub const MAX_CONFIG: usize = 4 << 20;
/// Largest text payload (activation, refusal, exec failure).
pub const MAX_TEXT: usize = 16 * 1024;
/// Header: kind (1) + length (4).
pub const HEADER: usize = 5;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("frame kind {kind}: payload of {len} bytes is over its limit of {limit}")]
    TooLong { kind: u8, len: usize, limit: usize },
    #[error("frame kind {kind}: {why}")]
    Malformed { kind: u8, why: String },
    #[error("frame kind {0} does not travel in this direction")]
    WrongDirection(u8),
}

/// What the guest is told to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestConfig {
    /// PATH candidates for argv[0], in order (expanded by the host, as for
    /// the namespace box).
    pub candidates: Vec<Vec<u8>>,
    pub argv: Vec<Vec<u8>>,
    /// `NAME=VALUE` entries, exactly the workload's environment.
    pub envp: Vec<Vec<u8>>,
    pub cwd: String,
    /// The workload's uid and gid in the guest (the caller's, as in the
    /// namespace box; every capability is dropped, also for uid 0).
    pub uid: u32,
    pub gid: u32,
    /// A host path outside every grant: opening it in the guest must fail.
    pub canary_path: Vec<u8>,
    /// Addresses a connect() from the guest must not reach.
    pub canary_tcp: Vec<std::net::SocketAddr>,
    /// Mediated networking: the guest's address, netmask bits and the one
    /// endpoint (the broker's proxy, through QEMU's guestfwd).
    pub net: Option<GuestNet>,
    /// The 9p share of the box's tree, and its mount options.
    pub share_tag: String,
    pub msize: u32,
    /// The caller's stdin and stdout are a terminal: the workload gets a
    /// pseudo-terminal of the guest's own with this size (rows, columns).
    #[serde(default)]
    pub terminal: Option<(u16, u16)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestNet {
    pub address: std::net::Ipv4Addr,
    pub prefix: u8,
    pub proxy: std::net::SocketAddrV4,
}

/// Host -> guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToGuest {
    Config(Box<GuestConfig>),
    Stdin(Vec<u8>),
    StdinEof,
    Signal(i32),
    WindowSize { rows: u16, cols: u16 },
}

/// Guest -> host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromGuest {
    Ready,
    Activation(String),
    Refused(String),
    ExecFailed { code: i32, reason: String },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit { signaled: bool, value: i32 },
}

const K_CONFIG: u8 = 1;
const K_STDIN: u8 = 2;
const K_STDIN_EOF: u8 = 3;
const K_SIGNAL: u8 = 4;
const K_WINSIZE: u8 = 5;
const K_READY: u8 = 64;
const K_ACTIVATION: u8 = 65;
const K_REFUSED: u8 = 66;
const K_EXEC_FAILED: u8 = 67;
const K_STDOUT: u8 = 68;
const K_STDERR: u8 = 69;
const K_EXIT: u8 = 70;

/// The payload limit of a kind; None: not a kind of this protocol.
fn limit(kind: u8) -> Option<usize> {
    Some(match kind {
        K_CONFIG => MAX_CONFIG,
        K_STDIN | K_STDOUT | K_STDERR => MAX_DATA,
        K_STDIN_EOF | K_READY => 0,
        K_SIGNAL => 4,
        K_WINSIZE => 4,
        K_ACTIVATION | K_REFUSED => MAX_TEXT,
        K_EXEC_FAILED => 4 + MAX_TEXT,
        K_EXIT => 5,
        _ => return None,
    })
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + payload.len());
    v.push(kind);
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// Cuts text to at most `max` bytes on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl ToGuest {
    /// The frame's bytes. Data longer than [`MAX_DATA`] must be split by the
    /// caller ([`ToGuest::stdin_frames`]); a configuration over its limit is
    /// an error.
    pub fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        Ok(match self {
            ToGuest::Config(c) => {
                let body = serde_json::to_vec(c).map_err(|e| ProtoError::Malformed {
                    kind: K_CONFIG,
                    why: e.to_string(),
                })?;
                if body.len() > MAX_CONFIG {
                    return Err(ProtoError::TooLong {
                        kind: K_CONFIG,
                        len: body.len(),
                        limit: MAX_CONFIG,
                    });
                }
                frame(K_CONFIG, &body)
            }
            ToGuest::Stdin(b) => {
                if b.len() > MAX_DATA {
                    return Err(ProtoError::TooLong {
                        kind: K_STDIN,
                        len: b.len(),
                        limit: MAX_DATA,
                    });
                }
                frame(K_STDIN, b)
            }
            ToGuest::StdinEof => frame(K_STDIN_EOF, &[]),
            ToGuest::Signal(s) => frame(K_SIGNAL, &s.to_le_bytes()),
            ToGuest::WindowSize { rows, cols } => {
                let mut p = rows.to_le_bytes().to_vec();
                p.extend_from_slice(&cols.to_le_bytes());
                frame(K_WINSIZE, &p)
            }
        })
    }

    /// Stdin bytes as frames of at most [`MAX_DATA`].
    pub fn stdin_frames(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(data.len() + HEADER);
        for chunk in data.chunks(MAX_DATA) {
            out.extend_from_slice(&frame(K_STDIN, chunk));
        }
        out
    }
}

impl FromGuest {
    /// The frame's bytes; text is cut to its limit, data must be split by
    /// the caller ([`FromGuest::data_frames`]).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            FromGuest::Ready => frame(K_READY, &[]),
            FromGuest::Activation(s) => frame(K_ACTIVATION, cut(s, MAX_TEXT).as_bytes()),
            FromGuest::Refused(s) => frame(K_REFUSED, cut(s, MAX_TEXT).as_bytes()),
            FromGuest::ExecFailed { code, reason } => {
                let mut p = code.to_le_bytes().to_vec();
                p.extend_from_slice(cut(reason, MAX_TEXT).as_bytes());
                frame(K_EXEC_FAILED, &p)
            }
            FromGuest::Stdout(b) => frame(K_STDOUT, &b[..b.len().min(MAX_DATA)]),
            FromGuest::Stderr(b) => frame(K_STDERR, &b[..b.len().min(MAX_DATA)]),
            FromGuest::Exit { signaled, value } => {
                let mut p = vec![u8::from(*signaled)];
                p.extend_from_slice(&value.to_le_bytes());
                frame(K_EXIT, &p)
            }
        }
    }

    /// Output bytes as frames of at most [`MAX_DATA`] (`stderr`: kind Stderr).
    pub fn data_frames(stderr: bool, data: &[u8]) -> Vec<u8> {
        let kind = if stderr { K_STDERR } else { K_STDOUT };
        let mut out = Vec::with_capacity(data.len() + HEADER);
        for chunk in data.chunks(MAX_DATA) {
            out.extend_from_slice(&frame(kind, chunk));
        }
        out
    }
}

/// A strict incremental decoder: feed bytes with [`Decoder::push`], take
/// frames with [`Decoder::next_to_guest`] or [`Decoder::next_from_guest`].
/// After an error the decoder stays failed.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    failed: Option<ProtoError>,
}

/// The most bytes the decoder buffers: one largest frame and its header.
const MAX_BUFFERED: usize = HEADER + MAX_CONFIG;

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Adds received bytes. The caller reads at most [`Decoder::room`]
    /// bytes at a time, so the buffer never holds more than one largest
    /// frame plus a read.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// How many bytes may be read before the next [`Decoder::push`]: the
    /// rest of the current frame when its header is known (never more than
    /// its kind's limit allows), else enough for a header.
    pub fn room(&self) -> usize {
        let want = match self.header() {
            Ok(Some((_, len))) => HEADER + len,
            _ => HEADER,
        };
        want.saturating_sub(self.buf.len()).clamp(1, MAX_BUFFERED)
    }

    /// The current frame's kind and length, checked against the kind's
    /// limit (before anything of its payload is buffered beyond it).
    fn header(&self) -> Result<Option<(u8, usize)>, ProtoError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let kind = self.buf[0];
        let len = u32::from_le_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        let max = limit(kind).ok_or(ProtoError::UnknownKind(kind))?;
        if len > max {
            return Err(ProtoError::TooLong {
                kind,
                len,
                limit: max,
            });
        }
        Ok(Some((kind, len)))
    }

    /// The next complete frame's kind and payload, or None.
    fn take(&mut self) -> Result<Option<(u8, Vec<u8>)>, ProtoError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let (kind, len) = match self.header() {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(None),
            Err(e) => {
                self.failed = Some(e.clone());
                return Err(e);
            }
        };
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let payload = self.buf[HEADER..HEADER + len].to_vec();
        self.buf.drain(..HEADER + len);
        Ok(Some((kind, payload)))
    }

    fn fail<T>(&mut self, e: ProtoError) -> Result<T, ProtoError> {
        self.failed = Some(e.clone());
        Err(e)
    }

    /// The next message for the guest (the guest decodes these).
    pub fn next_to_guest(&mut self) -> Result<Option<ToGuest>, ProtoError> {
        let Some((kind, p)) = self.take()? else {
            return Ok(None);
        };
        let msg = match kind {
            K_CONFIG => match serde_json::from_slice::<GuestConfig>(&p) {
                Ok(c) => ToGuest::Config(Box::new(c)),
                Err(e) => {
                    return self.fail(ProtoError::Malformed {
                        kind,
                        why: e.to_string(),
                    })
                }
            },
            K_STDIN => ToGuest::Stdin(p),
            K_STDIN_EOF => ToGuest::StdinEof,
            K_SIGNAL => match <[u8; 4]>::try_from(p.as_slice()) {
                Ok(b) => ToGuest::Signal(i32::from_le_bytes(b)),
                Err(_) => return self.fail(malformed(kind, "a signal is 4 bytes")),
            },
            K_WINSIZE => match <[u8; 4]>::try_from(p.as_slice()) {
                Ok(b) => ToGuest::WindowSize {
                    rows: u16::from_le_bytes([b[0], b[1]]),
                    cols: u16::from_le_bytes([b[2], b[3]]),
                },
                Err(_) => return self.fail(malformed(kind, "a window size is 4 bytes")),
            },
            other => return self.fail(ProtoError::WrongDirection(other)),
        };
        Ok(Some(msg))
    }

    /// The next message from the guest (the host decodes these).
    pub fn next_from_guest(&mut self) -> Result<Option<FromGuest>, ProtoError> {
        let Some((kind, p)) = self.take()? else {
            return Ok(None);
        };
        let text =
            |p: Vec<u8>| String::from_utf8(p).map_err(|_| malformed(kind, "text is not UTF-8"));
        let msg = match kind {
            K_READY => Ok(FromGuest::Ready),
            K_ACTIVATION => text(p).map(FromGuest::Activation),
            K_REFUSED => text(p).map(FromGuest::Refused),
            K_EXEC_FAILED => {
                if p.len() < 4 {
                    Err(malformed(kind, "an exec failure starts with a 4-byte code"))
                } else {
                    let code = i32::from_le_bytes([p[0], p[1], p[2], p[3]]);
                    if code != 126 && code != 127 {
                        Err(malformed(kind, "an exec failure's code is 126 or 127"))
                    } else {
                        text(p[4..].to_vec()).map(|reason| FromGuest::ExecFailed { code, reason })
                    }
                }
            }
            K_STDOUT => Ok(FromGuest::Stdout(p)),
            K_STDERR => Ok(FromGuest::Stderr(p)),
            K_EXIT => {
                if p.len() != 5 || p[0] > 1 {
                    Err(malformed(kind, "an exit is a 0/1 byte and 4 bytes"))
                } else {
                    let value = i32::from_le_bytes([p[1], p[2], p[3], p[4]]);
                    let signaled = p[0] == 1;
                    if (signaled && !(1..=64).contains(&value))
                        || (!signaled && !(0..=255).contains(&value))
                    {
                        Err(malformed(kind, "an exit code is 0..=255, a signal 1..=64"))
                    } else {
                        Ok(FromGuest::Exit { signaled, value })
                    }
                }
            }
            other => Err(ProtoError::WrongDirection(other)),
        };
        match msg {
            Ok(m) => Ok(Some(m)),
            Err(e) => self.fail(e),
        }
    }
}

fn malformed(kind: u8, why: &str) -> ProtoError {
    ProtoError::Malformed {
        kind,
        why: why.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GuestConfig {
        GuestConfig {
            candidates: vec![b"/bin/sh".to_vec()],
            argv: vec![b"sh".to_vec(), b"-c".to_vec(), b"echo hi".to_vec()],
            envp: vec![b"PATH=/usr/bin:/bin".to_vec()],
            cwd: "/work".into(),
            uid: 65534,
            gid: 65534,
            canary_path: b"/state/request.json".to_vec(),
            canary_tcp: vec!["127.0.0.1:4000".parse().unwrap()],
            net: Some(GuestNet {
                address: "10.0.2.15".parse().unwrap(),
                prefix: 24,
                proxy: "10.0.2.100:3128".parse().unwrap(),
            }),
            share_tag: "terra-root".into(),
            msize: 512 * 1024,
            terminal: Some((24, 80)),
        }
    }

    #[test]
    fn every_message_round_trips_also_byte_by_byte() {
        let to = vec![
            ToGuest::Config(Box::new(config())),
            ToGuest::Stdin(b"input".to_vec()),
            ToGuest::StdinEof,
            ToGuest::Signal(15),
            ToGuest::WindowSize { rows: 24, cols: 80 },
        ];
        let mut bytes = Vec::new();
        for m in &to {
            bytes.extend(m.encode().unwrap());
        }
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for b in &bytes {
            d.push(std::slice::from_ref(b));
            while let Some(m) = d.next_to_guest().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, to);

        let from = vec![
            FromGuest::Ready,
            FromGuest::Activation("passed".into()),
            FromGuest::Refused("no".into()),
            FromGuest::ExecFailed {
                code: 127,
                reason: "x: not found".into(),
            },
            FromGuest::Stdout(b"out".to_vec()),
            FromGuest::Stderr(vec![0xff; 3]),
            FromGuest::Exit {
                signaled: true,
                value: 9,
            },
            FromGuest::Exit {
                signaled: false,
                value: 3,
            },
        ];
        let mut d = Decoder::new();
        for m in &from {
            d.push(&m.encode());
        }
        let mut got = Vec::new();
        while let Some(m) = d.next_from_guest().unwrap() {
            got.push(m);
        }
        assert_eq!(got, from);
    }

    #[test]
    fn large_data_is_split_into_frames_under_the_limit() {
        let data = vec![7u8; MAX_DATA * 2 + 5];
        let mut d = Decoder::new();
        d.push(&FromGuest::data_frames(true, &data));
        let mut all = Vec::new();
        let mut frames = 0;
        while let Some(FromGuest::Stderr(b)) = d.next_from_guest().unwrap() {
            assert!(b.len() <= MAX_DATA);
            all.extend(b);
            frames += 1;
        }
        assert_eq!((all, frames), (data, 3));
        assert!(ToGuest::Stdin(vec![0; MAX_DATA + 1]).encode().is_err());
    }

    #[test]
    fn the_decoder_refuses_before_it_buffers_an_oversized_frame() {
        let mut d = Decoder::new();
        // A stdout frame claiming 4 GiB: refused from its header alone.
        d.push(&[K_STDOUT, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            d.next_from_guest(),
            Err(ProtoError::TooLong { kind: K_STDOUT, .. })
        ));
        // And it stays failed.
        d.push(&FromGuest::Ready.encode());
        assert!(d.next_from_guest().is_err());
        // The room asked for never exceeds one frame.
        let mut d = Decoder::new();
        assert_eq!(d.room(), HEADER);
        d.push(&[K_STDOUT, 10, 0, 0, 0]);
        assert_eq!(d.room(), 10);
    }

    #[test]
    fn unknown_wrong_direction_and_malformed_frames_are_refused() {
        let cases: Vec<(Vec<u8>, bool)> = vec![
            (vec![200, 0, 0, 0, 0], false),
            // Config from the guest.
            (frame(K_CONFIG, b"{}"), false),
            // Exit with a bad flag, a bad code, a bad signal.
            (frame(K_EXIT, &[2, 0, 0, 0, 0]), false),
            (frame(K_EXIT, &[0, 0, 1, 0, 0]), false),
            (frame(K_EXIT, &[1, 0, 0, 0, 0]), false),
            (frame(K_ACTIVATION, &[0xff]), false),
            (frame(K_EXEC_FAILED, &[1, 0, 0, 0]), false),
            (frame(K_READY, &[]), true),
        ];
        for (bytes, ok) in cases {
            let mut d = Decoder::new();
            d.push(&bytes);
            assert_eq!(d.next_from_guest().is_ok(), ok, "{bytes:?}");
        }
        for bytes in [
            frame(K_READY, &[]),
            frame(K_SIGNAL, &[1, 2]),
            frame(K_CONFIG, b"{\"argv\": 3}"),
            frame(K_WINSIZE, &[1, 2, 3]),
        ] {
            let mut d = Decoder::new();
            d.push(&bytes);
            assert!(d.next_to_guest().is_err(), "{bytes:?}");
        }
    }
}

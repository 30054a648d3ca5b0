//! The contract between the box's init (terra-sandbox) and its network
//! service (terra-netd's `box_service`): the descriptors the init opens
//! inside the box before the workload exists, and the service's entry.

use std::os::fd::OwnedFd;

/// The descriptors of the box's network service, made by the box's init
/// inside the box before the workload exists.
pub struct ServiceFds {
    /// The workload sends its connect-notification listener here, once
    /// (SCM_RIGHTS), right after it installed the filter.
    pub notify_channel: OwnedFd,
    /// The box's /proc (O_PATH), opened before the workload ran: the
    /// workload's fdinfo is read relative to it.
    pub proc_dir: OwnedFd,
    /// Mediated networking's part.
    pub mediated: Option<MediatedFds>,
    /// Network none's part: the DNS stub that refuses every name.
    pub refusing_dns: Option<RefusingDnsFds>,
}

/// Network none: the DNS stub's sockets on the box loopback port 53, and
/// where it says each name asked (init's standard error).
pub struct RefusingDnsFds {
    pub dns_udp: std::net::UdpSocket,
    pub dns_tcp: std::net::TcpListener,
    pub report: OwnedFd,
}

/// The network service's descriptors of mediated networking.
pub struct MediatedFds {
    /// The proxy's listener on the box loopback (`proxy_listen_addr`).
    pub proxy: std::net::TcpListener,
    /// The box end of the fd 7 socketpair to the broker.
    pub broker: OwnedFd,
    /// The DNS stub's sockets, UDP and TCP, on the box loopback port 53.
    pub dns_udp: std::net::UdpSocket,
    pub dns_tcp: std::net::TcpListener,
    /// A listener on the box loopback (an ephemeral port): the service
    /// makes TCP pairs with it for the checked (TLS SNI) path.
    pub relay: std::net::TcpListener,
}

/// A service that runs inside the box (in a child of the box init, after the
/// box's namespaces and root are in place) before the workload starts: it
/// answers the workload's connect() calls (the AF_UNIX rule; mediated: the
/// hand-off) and, with mediated networking, serves the proxy and the DNS
/// stub. Never returns.
pub type BoxService = fn(ServiceFds) -> !;

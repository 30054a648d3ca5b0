//! Address classification (spec section 7): which addresses are private, that is
//! not globally routable. A destination that does not allow private addresses
//! is refused when its name resolves to any of them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// True when `addr` is not globally routable (spec section 7).
///
/// IPv4: 0.0.0.0/8 (includes unspecified), 10/8, 100.64/10 (CGNAT), 127/8,
/// 169.254/16 (link-local, cloud metadata), 172.16/12, 192.0.0/24 (IETF
/// protocol assignments), 192.0.2/24, 198.51.100/24, 203.0.113/24
/// (documentation), 192.168/16, 198.18/15 (benchmarking), 224/4 (multicast),
/// 240/4 (reserved, includes broadcast 255.255.255.255).
///
/// IPv6: everything outside 2000::/3 (loopback, unspecified, unique-local,
/// link-local, multicast, ...) except IPv4-mapped ::ffff:0:0/96 and NAT64
/// 64:ff9b::/96, which are judged by the IPv4 address they embed; the
/// local-use NAT64 prefix 64:ff9b:1::/48 is private when any RFC 6052 embedding
/// of it (prefix lengths 48, 56, 64, 96) holds a private IPv4 address. Inside
/// 2000::/3: documentation 2001:db8::/32 and 3fff::/20, benchmarking 2001:2::/48.
pub fn is_private(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => is_private_v6(v6),
    }
}

/// IPv4 part of [`is_private`].
pub fn is_private_v4(addr: Ipv4Addr) -> bool {
    let v = u32::from(addr);
    const RANGES: &[(u32, u8)] = &[
        (0x0000_0000, 8),  // 0.0.0.0/8 "this network", unspecified
        (0x0a00_0000, 8),  // 10/8
        (0x6440_0000, 10), // 100.64/10 CGNAT
        (0x7f00_0000, 8),  // 127/8 loopback
        (0xa9fe_0000, 16), // 169.254/16 link-local
        (0xac10_0000, 12), // 172.16/12
        (0xc000_0000, 24), // 192.0.0/24 IETF protocol assignments
        (0xc000_0200, 24), // 192.0.2/24 TEST-NET-1
        (0xc0a8_0000, 16), // 192.168/16
        (0xc612_0000, 15), // 198.18/15 benchmarking
        (0xc633_6400, 24), // 198.51.100/24 TEST-NET-2
        (0xcb00_7100, 24), // 203.0.113/24 TEST-NET-3
        (0xe000_0000, 4),  // 224/4 multicast
        (0xf000_0000, 4),  // 240/4 reserved + broadcast
    ];
    RANGES.iter().any(|&(net, len)| {
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        v & mask == net
    })
}

fn in_prefix_v6(v: u128, net: u128, len: u32) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    v & mask == net
}

/// IPv6 part of [`is_private`].
pub fn is_private_v6(addr: Ipv6Addr) -> bool {
    let v = u128::from(addr);
    // IPv4-mapped ::ffff:0:0/96 and well-known NAT64 64:ff9b::/96.
    if in_prefix_v6(v, 0xffff_0000_0000, 96) || in_prefix_v6(v, 0x0064_ff9b << 96, 96) {
        return is_private_v4(Ipv4Addr::from(v as u32));
    }
    // Local-use NAT64 64:ff9b:1::/48 (RFC 8215): any plausible embedding.
    if in_prefix_v6(v, (0x0064_ff9b_0001u128) << 80, 48) {
        return rfc6052_embeddings(addr).into_iter().any(is_private_v4);
    }
    if !in_prefix_v6(v, 0x1u128 << 125, 3) {
        return true; // outside global unicast 2000::/3
    }
    in_prefix_v6(v, 0x2001_0db8u128 << 96, 32)
        || in_prefix_v6(v, 0x3fffu128 << 112, 20)
        || in_prefix_v6(v, 0x2001_0002u128 << 96, 48)
}

/// The IPv4 addresses an RFC 6052 translator with prefix length 48, 56, 64 or
/// 96 would extract from `addr` (bits 64..72, the "u" octet, are skipped).
fn rfc6052_embeddings(addr: Ipv6Addr) -> [Ipv4Addr; 4] {
    let o = addr.octets();
    [
        Ipv4Addr::new(o[6], o[7], o[9], o[10]),    // /48
        Ipv4Addr::new(o[7], o[9], o[10], o[11]),   // /56
        Ipv4Addr::new(o[9], o[10], o[11], o[12]),  // /64
        Ipv4Addr::new(o[12], o[13], o[14], o[15]), // /96
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> bool {
        is_private(s.parse().unwrap())
    }

    /// Every IPv4 range: first and last address are private, the neighbours
    /// just outside are public.
    #[test]
    fn ipv4_ranges_both_edges() {
        let ranges: &[(&str, &str, Option<&str>, Option<&str>)] = &[
            ("0.0.0.0", "0.255.255.255", None, Some("1.0.0.0")),
            (
                "10.0.0.0",
                "10.255.255.255",
                Some("9.255.255.255"),
                Some("11.0.0.0"),
            ),
            (
                "100.64.0.0",
                "100.127.255.255",
                Some("100.63.255.255"),
                Some("100.128.0.0"),
            ),
            (
                "127.0.0.0",
                "127.255.255.255",
                Some("126.255.255.255"),
                Some("128.0.0.0"),
            ),
            (
                "169.254.0.0",
                "169.254.255.255",
                Some("169.253.255.255"),
                Some("169.255.0.0"),
            ),
            (
                "172.16.0.0",
                "172.31.255.255",
                Some("172.15.255.255"),
                Some("172.32.0.0"),
            ),
            (
                "192.0.0.0",
                "192.0.0.255",
                Some("191.255.255.255"),
                Some("192.0.1.0"),
            ),
            (
                "192.0.2.0",
                "192.0.2.255",
                Some("192.0.1.255"),
                Some("192.0.3.0"),
            ),
            (
                "192.168.0.0",
                "192.168.255.255",
                Some("192.167.255.255"),
                Some("192.169.0.0"),
            ),
            (
                "198.18.0.0",
                "198.19.255.255",
                Some("198.17.255.255"),
                Some("198.20.0.0"),
            ),
            (
                "198.51.100.0",
                "198.51.100.255",
                Some("198.51.99.255"),
                Some("198.51.101.0"),
            ),
            (
                "203.0.113.0",
                "203.0.113.255",
                Some("203.0.112.255"),
                Some("203.0.114.0"),
            ),
            (
                "224.0.0.0",
                "239.255.255.255",
                Some("223.255.255.255"),
                None,
            ),
            ("240.0.0.0", "255.255.255.255", None, None),
        ];
        for (first, last, below, above) in ranges {
            assert!(p(first), "{first}");
            assert!(p(last), "{last}");
            if let Some(b) = below {
                assert!(!p(b), "{b}");
            }
            if let Some(a) = above {
                assert!(!p(a), "{a}");
            }
        }
        for named in ["0.0.0.0", "255.255.255.255", "169.254.169.254", "127.0.0.1"] {
            assert!(p(named), "{named}");
        }
        for public in ["1.1.1.1", "8.8.8.8", "93.184.216.34", "223.255.255.255"] {
            assert!(!p(public), "{public}");
        }
    }

    #[test]
    fn ipv6_ranges_both_edges() {
        // Outside 2000::/3 is private; the edges of 2000::/3 itself.
        for s in [
            "::",
            "::1",
            "fc00::",
            "fdff:ffff::1",
            "fe80::1",
            "febf::1",
            "ff02::1",
            "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "4000::",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "100::1",
        ] {
            assert!(p(s), "{s}");
        }
        for s in [
            "2000::",
            "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "2606:4700::1111",
            "2001:4860:4860::8888",
        ] {
            // 3fff:ffff:.. is outside 3fff::/20 (which ends at 3fff:0fff:..).
            assert!(!p(s), "{s}");
        }
        // Documentation 2001:db8::/32.
        assert!(p("2001:db8::"));
        assert!(p("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"));
        assert!(!p("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff"));
        assert!(!p("2001:db9::"));
        // Documentation 3fff::/20.
        assert!(p("3fff::"));
        assert!(p("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff"));
        assert!(!p("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
        assert!(!p("3fff:1000::"));
        // Benchmarking 2001:2::/48.
        assert!(p("2001:2::"));
        assert!(p("2001:2:0:ffff:ffff:ffff:ffff:ffff"));
        assert!(!p("2001:1:ffff:ffff:ffff:ffff:ffff:ffff"));
        assert!(!p("2001:2:1::"));
    }

    #[test]
    fn embedded_ipv4() {
        // IPv4-mapped ::ffff:0:0/96 is judged by the embedded address.
        assert!(p("::ffff:127.0.0.1"));
        assert!(p("::ffff:0.0.0.0"));
        assert!(p("::ffff:169.254.169.254"));
        assert!(p("::ffff:255.255.255.255"));
        assert!(!p("::ffff:8.8.8.8"));
        assert!(!p("::ffff:1.0.0.0"));
        // Just outside the mapped prefix: outside 2000::/3, private.
        assert!(p("::fffe:808:808"));
        assert!(p("::1:0:808:808"));
        // NAT64 well-known prefix 64:ff9b::/96.
        assert!(p("64:ff9b::127.0.0.1"));
        assert!(p("64:ff9b::10.0.0.1"));
        assert!(p("64:ff9b::"));
        assert!(!p("64:ff9b::8.8.8.8"));
        assert!(!p("64:ff9b::223.255.255.255"));
        // Just outside 64:ff9b::/96 (and outside 2000::/3).
        assert!(p("64:ff9b:0:0:0:1:808:808"));
        assert!(p("64:ff9a:ffff:ffff:ffff:ffff:808:808"));
        // Local-use NAT64 64:ff9b:1::/48: public only when every embedding is.
        assert!(p("64:ff9b:1::7f00:1"));
        assert!(p("64:ff9b:1::808:808")); // the /48 embedding reads 0.0.0.x
        assert!(!p("64:ff9b:1:808:8:808:808:808"));
        assert!(p("64:ff9b:1:ffff:ffff:ffff:ffff:ffff"));
        // Edges of 64:ff9b:1::/48.
        assert!(p("64:ff9b:1::"));
        assert!(p("64:ff9b:2::808:808"));
    }
}

//! The DNS pins of one run: the names the box's DNS stub answered and the
//! addresses it gave, both ways. The broker holds them (`Broker::pins`); the
//! hand-off (`handoff`) pins a name's first answer and judges a workload's
//! connect() by the names pinned to its address.

use std::collections::HashMap;
use std::net::IpAddr;

/// The names the stub answered this run and their addresses, both ways.
#[derive(Default)]
pub(crate) struct Pins {
    names: HashMap<String, Vec<IpAddr>>,
    by_addr: HashMap<IpAddr, Vec<String>>,
}

impl Pins {
    /// The addresses pinned for `name`.
    pub(crate) fn addresses(&self, name: &str) -> Option<Vec<IpAddr>> {
        self.names.get(name).cloned()
    }

    /// The names whose pinned addresses include `ip`.
    pub(crate) fn names_at(&self, ip: IpAddr) -> &[String] {
        self.by_addr.get(&ip).map_or(&[], Vec::as_slice)
    }

    /// Pins `addrs` for `name` unless a concurrent lookup already did; the
    /// addresses every later answer gives.
    pub(crate) fn pin(&mut self, name: &str, addrs: Vec<IpAddr>) -> Vec<IpAddr> {
        if let Some(old) = self.names.get(name) {
            return old.clone();
        }
        for a in &addrs {
            let names = self.by_addr.entry(*a).or_default();
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        self.names.insert(name.to_owned(), addrs.clone());
        addrs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_answer_is_pinned() {
        let mut p = Pins::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        assert_eq!(p.pin("x.test", vec![a]), vec![a]);
        assert_eq!(p.pin("x.test", vec![b]), vec![a]);
        assert!(!p.by_addr.contains_key(&b));
    }
}

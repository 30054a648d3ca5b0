//! Which kernel modules the guest loads, and in which order, read from the
//! chosen kernel's `modules.dep` (what depmod writes): the guest needs
//! virtio over MMIO, the console port of the control channel, 9p over
//! virtio for the box's tree, and virtio-net for mediated networking. A
//! module the kernel has built in (`modules.builtin`) needs nothing.

use std::collections::{BTreeMap, BTreeSet};

/// The modules every guest needs (their dependencies come along).
pub const WANTED: [&str; 4] = ["virtio_mmio", "virtio_console", "9pnet_virtio", "9p"];
/// The modules a guest with mediated networking needs besides: loaded only
/// then (a network none guest has no NIC at all).
pub const WANTED_NET: [&str; 1] = ["virtio_net"];

/// The load order of [`WANTED`], and of what [`WANTED_NET`] adds after it.
pub fn split_order(
    table: &DepTable,
    builtin: &BTreeSet<String>,
) -> Result<(Vec<String>, Vec<String>), ModuleError> {
    let base = table.load_order(&WANTED, builtin)?;
    let all: Vec<&str> = WANTED.iter().chain(WANTED_NET.iter()).copied().collect();
    let net = table
        .load_order(&all, builtin)?
        .into_iter()
        .filter(|p| !base.contains(p))
        .collect();
    Ok((base, net))
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModuleError {
    #[error("modules.dep line {line}: {why}")]
    Syntax { line: usize, why: String },
    #[error("the kernel has no module {0} (neither in modules.dep nor built in)")]
    Missing(String),
    #[error("module dependency cycle at {0}")]
    Cycle(String),
}

/// A module's name from its path: the file name without `.ko` (and a
/// compression suffix), with `-` as `_` (as the kernel names it).
pub fn name_of(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = [".ko.xz", ".ko.zst", ".ko.gz", ".ko"]
        .iter()
        .find_map(|s| file.strip_suffix(s))
        .unwrap_or(file);
    stem.replace('-', "_")
}

/// `modules.dep` parsed: name -> (path, dependency paths).
#[derive(Debug, Default)]
pub struct DepTable {
    entries: BTreeMap<String, (String, Vec<String>)>,
}

impl DepTable {
    pub fn parse(text: &str) -> Result<DepTable, ModuleError> {
        let mut entries = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (path, deps) = line.split_once(':').ok_or_else(|| ModuleError::Syntax {
                line: i + 1,
                why: "no ':'".into(),
            })?;
            let path = path.trim();
            if path.is_empty() || path.contains("..") || path.starts_with('/') {
                return Err(ModuleError::Syntax {
                    line: i + 1,
                    why: format!("bad module path {path:?}"),
                });
            }
            let deps: Vec<String> = deps.split_whitespace().map(str::to_string).collect();
            if let Some(bad) = deps.iter().find(|d| d.contains("..") || d.starts_with('/')) {
                return Err(ModuleError::Syntax {
                    line: i + 1,
                    why: format!("bad dependency path {bad:?}"),
                });
            }
            entries.insert(name_of(path), (path.to_string(), deps));
        }
        Ok(DepTable { entries })
    }

    /// Paths (relative to the modules directory) of `wanted` and their
    /// dependencies, each after everything it depends on. `builtin`: names
    /// the kernel has built in.
    pub fn load_order(
        &self,
        wanted: &[&str],
        builtin: &BTreeSet<String>,
    ) -> Result<Vec<String>, ModuleError> {
        let mut order = Vec::new();
        let mut done = BTreeSet::new();
        for w in wanted {
            let name = w.replace('-', "_");
            if builtin.contains(&name) {
                continue;
            }
            self.visit(&name, &mut done, &mut BTreeSet::new(), &mut order)?;
        }
        Ok(order)
    }

    fn visit(
        &self,
        name: &str,
        done: &mut BTreeSet<String>,
        active: &mut BTreeSet<String>,
        order: &mut Vec<String>,
    ) -> Result<(), ModuleError> {
        if done.contains(name) {
            return Ok(());
        }
        if !active.insert(name.to_string()) {
            return Err(ModuleError::Cycle(name.into()));
        }
        let (path, deps) = self
            .entries
            .get(name)
            .ok_or_else(|| ModuleError::Missing(name.into()))?;
        // depmod lists the dependencies closest last: load from the end.
        for d in deps.iter().rev() {
            self.visit(&name_of(d), done, active, order)?;
        }
        active.remove(name);
        done.insert(name.to_string());
        order.push(path.clone());
        Ok(())
    }
}

/// Names in `modules.builtin` (one path per line).
pub fn builtin(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(name_of)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "\
kernel/fs/netfs/netfs.ko:
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/char/virtio_console.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/net/9p/9pnet.ko:
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/virtio_net.ko.xz: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
";

    #[test]
    fn every_module_comes_after_its_dependencies() {
        let t = DepTable::parse(DEP).unwrap();
        let all: Vec<&str> = WANTED.iter().chain(WANTED_NET.iter()).copied().collect();
        let order = t.load_order(&all, &BTreeSet::new()).unwrap();
        let pos = |n: &str| {
            order
                .iter()
                .position(|p| name_of(p) == n)
                .unwrap_or_else(|| panic!("{n} in {order:?}"))
        };
        for (before, after) in [
            ("virtio_ring", "virtio"),
            ("virtio", "virtio_mmio"),
            ("virtio", "virtio_console"),
            ("9pnet", "9pnet_virtio"),
            ("netfs", "fscache"),
            ("fscache", "9p"),
            ("9pnet", "9p"),
            ("failover", "net_failover"),
            ("net_failover", "virtio_net"),
        ] {
            assert!(
                pos(before) < pos(after),
                "{before} before {after}: {order:?}"
            );
        }
        assert_eq!(order.len(), 12, "{order:?}");
        let unique: BTreeSet<_> = order.iter().collect();
        assert_eq!(unique.len(), order.len());
    }

    #[test]
    fn the_network_modules_load_apart_after_the_others() {
        let t = DepTable::parse(DEP).unwrap();
        let (base, net) = split_order(&t, &BTreeSet::new()).unwrap();
        let names = |v: &[String]| v.iter().map(|p| name_of(p)).collect::<Vec<_>>();
        assert_eq!(names(&net), ["failover", "net_failover", "virtio_net"]);
        assert_eq!(base.len(), 9, "{base:?}");
        for n in names(&net) {
            assert!(!names(&base).contains(&n), "{n} in both");
        }
    }

    #[test]
    fn built_in_modules_are_skipped_and_missing_ones_named() {
        let t = DepTable::parse(DEP).unwrap();
        let b = builtin("kernel/fs/9p/9p.ko\nkernel/drivers/net/virtio_net.ko\n");
        let order = t.load_order(&["9p", "virtio_net"], &b).unwrap();
        assert!(order.is_empty(), "{order:?}");
        assert_eq!(
            t.load_order(&["vsock"], &BTreeSet::new()),
            Err(ModuleError::Missing("vsock".into()))
        );
        assert_eq!(name_of("kernel/x/virtio-rng.ko.zst"), "virtio_rng");
    }

    #[test]
    fn bad_lines_and_cycles_are_refused() {
        assert!(DepTable::parse("no colon here").is_err());
        assert!(DepTable::parse("../x.ko:").is_err());
        assert!(DepTable::parse("a.ko: /abs/b.ko").is_err());
        let t = DepTable::parse("a.ko: b.ko\nb.ko: a.ko\n").unwrap();
        assert!(matches!(
            t.load_order(&["a"], &BTreeSet::new()),
            Err(ModuleError::Cycle(_))
        ));
    }
}

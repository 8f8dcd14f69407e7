//! Worker hosts in network namespaces of their own, for partition tests: each host is a
//! namespace joined to this one by a veth pair with link-local addresses the test assigns
//! itself (`169.254.N.4k+1` on this side, `.4k+2` inside, a /30 per host), so its only route
//! is to this side, where the test's private PostgreSQL listens. A partition takes this side's
//! end of the link down (every packet dropped, connections neither reset nor closed), a heal
//! brings it back up. No traffic goes to any other address.
//!
//! Needs root and `ip` (iproute2). [`Hosts::create`] answers `None` after printing why when
//! namespaces cannot be created and skipping is allowed; `DROVER_REQUIRE_NETNS` (set by
//! `.ci/run`) turns that into a failure. Dropping [`Hosts`] deletes the namespaces (their veth
//! pairs go with them).

use std::process::Stdio;

/// The variable that forbids skipping when namespaces cannot be created.
pub const REQUIRE_VAR: &str = "DROVER_REQUIRE_NETNS";

/// Runs `ip ARGS`; the error names the command and what it printed.
fn ip(args: &[&str]) -> Result<(), String> {
    let output = std::process::Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// One worker host.
pub struct Host {
    /// The namespace's name.
    pub namespace: String,
    /// This side's end of the veth pair.
    link: String,
    /// This side's address: where PostgreSQL listens for this host.
    pub gateway: String,
}

impl Host {
    /// Cuts the host off: this side's end of its link goes down.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn partition(&self) {
        ip(&["link", "set", &self.link, "down"]).expect("take the link down");
    }

    /// Restores the host's link.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn heal(&self) {
        ip(&["link", "set", &self.link, "up"]).expect("bring the link up");
    }

    /// A command that runs `program` inside the host's namespace (`ip netns exec`, which execs
    /// it: the child's pid is the program's).
    pub fn command(&self, program: &std::path::Path) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("ip");
        command
            .args(["netns", "exec", &self.namespace])
            .arg(program);
        command
    }
}

/// The worker hosts of one test; deleted on drop.
pub struct Hosts {
    /// The hosts, in order.
    pub hosts: Vec<Host>,
}

impl Hosts {
    /// Creates `count` hosts (at most 60), or `None` after printing why when this machine
    /// cannot and skipping is allowed.
    ///
    /// # Panics
    /// When it cannot and `DROVER_REQUIRE_NETNS` is set.
    pub fn create(test: &str, count: usize) -> Option<Hosts> {
        assert!(count <= 60, "at most 60 hosts fit one /24");
        // Names and the third octet differ per process, so runs of other test binaries (or a
        // killed run's leftovers) never collide.
        let pid = std::process::id();
        let octet = 16 + pid % 200;
        let mut hosts = Hosts { hosts: Vec::new() };
        for k in 0..count {
            let namespace = format!("drover-{pid}-{k}");
            let link = format!("dv{}h{k}", pid % 100_000);
            let inner = format!("dv{}n{k}", pid % 100_000);
            let base = 4 * k as u32;
            let gateway = format!("169.254.{octet}.{}", base + 1);
            let address = format!("169.254.{octet}.{}", base + 2);
            // Names and addresses hold no spaces: each step is split on them.
            let steps = [
                format!("netns add {namespace}"),
                format!("link add {link} type veth peer name {inner}"),
                format!("link set {inner} netns {namespace}"),
                format!("addr add {gateway}/30 dev {link}"),
                format!("link set {link} up"),
                format!("-n {namespace} addr add {address}/30 dev {inner}"),
                format!("-n {namespace} link set {inner} up"),
                format!("-n {namespace} link set lo up"),
            ];
            let created = Host {
                namespace: namespace.clone(),
                link: link.clone(),
                gateway,
            };
            // Registered before the steps, so a failure half-way is cleaned up too.
            hosts.hosts.push(created);
            for step in &steps {
                let args: Vec<&str> = step.split(' ').collect();
                if let Err(why) = ip(&args) {
                    drop(hosts);
                    let why = format!("network namespaces cannot be created here: {why}");
                    if std::env::var_os(REQUIRE_VAR).is_some() {
                        panic!("{test}: {why} ({REQUIRE_VAR} is set, so this fails)");
                    }
                    eprintln!("SKIPPED {test}: {why}");
                    return None;
                }
            }
        }
        Some(hosts)
    }

    /// This side's addresses, where PostgreSQL must listen.
    pub fn gateways(&self) -> Vec<String> {
        self.hosts.iter().map(|h| h.gateway.clone()).collect()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for host in &self.hosts {
            let _ = ip(&["link", "set", &host.link, "up"]);
            let _ = ip(&["netns", "del", &host.namespace]);
            let _ = ip(&["link", "del", &host.link]);
        }
    }
}

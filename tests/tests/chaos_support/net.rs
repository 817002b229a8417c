//! The chaos network: one network namespace per node, each joined by a veth pair to a bridge
//! in the root namespace, where the harness (clients, fault proxy) runs.
//!
//! ```text
//!  root namespace                                   namespace eddy-chaos-<pid>-n<i>
//!  bridge eddyc<pid>b  10.213.X.1/24                 eth0  10.213.X.(10+i)/24  (node i)
//!    + 10.213.X.(100+i): the proxy's stand-in for node i
//!    port eddyc<pid>v<i>  <---- veth pair ---->      eth0
//! ```
//!
//! Nodes never talk to each other directly: node i's `--peer j=` is 10.213.X.(100+j), where the
//! harness's proxy listens and forwards to node j from 10.213.X.(100+i). So inside node j's
//! namespace, everything node i sends comes from 10.213.X.(100+i): an `nft` rule on that
//! address cuts exactly the link between them, while the harness (10.213.X.1) still reaches
//! every node. Taking `eddyc<pid>v<i>` down cuts node i off from everything, clients included.
//!
//! Every name carries the harness's pid, so a teardown needs nothing but the pid: the guard's
//! `Drop`, the Ctrl-C handler and the start-up sweep of dead runs' leftovers share it.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// Prefix of every namespace the harness creates.
pub const NS_PREFIX: &str = "eddy-chaos-";
/// Prefix of every interface the harness creates (interface names are limited to 15 bytes).
const LINK_PREFIX: &str = "eddyc";

/// Runs a command; its stdout, or its stderr as the error.
pub fn sh(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs a command with `input` on stdin.
fn sh_stdin(program: &str, args: &[&str], input: &str) -> Result<(), String> {
    use std::io::Write as _;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(input.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Why this environment cannot run the chaos harness, if it cannot.
pub fn unavailable() -> Option<String> {
    // Probe names are unique within the process too: tests may probe at the same time.
    static PROBES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    if !rustix::process::geteuid().is_root() {
        return Some("not root: network namespaces need CAP_NET_ADMIN".to_owned());
    }
    if sh("ip", &["-V"]).is_err() {
        return Some("no `ip` command (iproute2)".to_owned());
    }
    let probe = format!(
        "{NS_PREFIX}{}-probe{}",
        std::process::id(),
        PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    if let Err(e) = sh("ip", &["netns", "add", &probe]) {
        return Some(format!("cannot create a network namespace: {e}"));
    }
    let _ = sh("ip", &["netns", "del", &probe]);
    None
}

/// Whether `nft` runs.
pub fn nft_available() -> bool {
    sh("nft", &["--version"]).is_ok()
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid embedded in one of our names after `prefix`, if it is one.
fn owner(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn namespaces() -> Vec<String> {
    sh("ip", &["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(NS_PREFIX))
        .map(str::to_owned)
        .collect()
}

fn links() -> Vec<String> {
    sh("ip", &["-o", "link", "show"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap_or("").to_owned())
        .filter(|n| n.starts_with(LINK_PREFIX))
        .collect()
}

/// Kills every process in a namespace, then deletes it.
fn remove_namespace(ns: &str) {
    for pid in sh("ip", &["netns", "pids", ns]).unwrap_or_default().lines() {
        if let Ok(pid) = pid.trim().parse::<i32>() {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
    let _ = sh("ip", &["netns", "del", ns]);
}

/// Removes everything a harness with this pid created: processes in its namespaces, the
/// namespaces (their nft tables and veth ends go with them), the bridge and veth ports.
pub fn teardown(pid: u32) {
    for ns in namespaces() {
        if owner(&ns, NS_PREFIX) == Some(pid) {
            remove_namespace(&ns);
        }
    }
    for link in links() {
        if owner(&link, LINK_PREFIX) == Some(pid) {
            let _ = sh("ip", &["link", "del", &link]);
        }
    }
}

/// Removes what earlier runs whose harness is gone left behind (killed harnesses cannot
/// clean up after themselves).
pub fn sweep_leftovers() {
    let mut dead: Vec<u32> = namespaces()
        .iter()
        .filter_map(|n| owner(n, NS_PREFIX))
        .chain(links().iter().filter_map(|l| owner(l, LINK_PREFIX)))
        .filter(|&pid| !pid_alive(pid))
        .collect();
    dead.sort_unstable();
    dead.dedup();
    for pid in dead {
        eprintln!("chaos: removing the leftovers of dead run {pid}");
        teardown(pid);
    }
}

/// The namespaces, veths and bridge of one run; removed on drop.
#[derive(Debug)]
pub struct Net {
    pid: u32,
    subnet: u8,
    nodes: u8,
    /// Node numbers the run may use: the founding `nodes`, then the members a membership
    /// change adds (their stand-ins exist from the start, their namespaces from their add).
    slots: u8,
}

impl Net {
    /// Creates the bridge, the stand-ins of `slots` nodes and the namespaces of the first
    /// `nodes` (numbered from 1); [`Net::add_node`] makes the others' when they join.
    pub fn create(nodes: u8, slots: u8) -> Result<Self, String> {
        let pid = std::process::id();
        let used = sh("ip", &["-o", "-4", "addr", "show"]).unwrap_or_default();
        let subnet = (0..200u32)
            .map(|k| u8::try_from((pid + k) % 200 + 20).expect("under 256"))
            .find(|x| !used.contains(&format!("10.213.{x}.")))
            .ok_or("no free 10.213.x.0/24")?;
        let net = Self {
            pid,
            subnet,
            nodes,
            slots: slots.max(nodes),
        };
        // Built after `net` exists, so a failure half-way is torn down by its drop.
        net.build()?;
        Ok(net)
    }

    fn build(&self) -> Result<(), String> {
        let net = self;
        let nodes = self.nodes;
        let bridge = net.bridge();
        sh("ip", &["link", "add", &bridge, "type", "bridge"])?;
        sh(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", net.gateway()),
                "dev",
                &bridge,
            ],
        )?;
        for i in 1..=self.slots {
            sh(
                "ip",
                &[
                    "addr",
                    "add",
                    &format!("{}/24", net.alias_ip(i)),
                    "dev",
                    &bridge,
                ],
            )?;
        }
        sh("ip", &["link", "set", &bridge, "up"])?;
        for i in 1..=nodes {
            self.add_node(i)?;
        }
        Ok(())
    }

    /// Creates node `node`'s namespace and its veth pair to the bridge (a new host for a
    /// member a membership change adds).
    pub fn add_node(&self, node: u8) -> Result<(), String> {
        assert!((1..=self.slots).contains(&node), "node {node} has no slot");
        let ns = self.namespace(node);
        let port = self.port(node);
        sh("ip", &["netns", "add", &ns])?;
        sh(
            "ip",
            &[
                "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ],
        )?;
        sh("ip", &["link", "set", &port, "master", &self.bridge()])?;
        sh("ip", &["link", "set", &port, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", ns.as_str(), "ip"];
            all.extend_from_slice(args);
            sh("ip", &all)
        };
        inside(&[
            "addr",
            "add",
            &format!("{}/24", self.node_ip(node)),
            "dev",
            "eth0",
        ])?;
        inside(&["link", "set", "eth0", "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(())
    }

    /// Removes node `node`'s namespace (its processes, nft table and veth pair go with it):
    /// a member removed from the cluster, its host gone.
    pub fn remove_node(&self, node: u8) {
        remove_namespace(&self.namespace(node));
        let _ = sh("ip", &["link", "del", &self.port(node)]);
    }

    /// Every node number of the run, founding or added.
    pub fn slots(&self) -> u8 {
        self.slots
    }

    fn bridge(&self) -> String {
        format!("{LINK_PREFIX}{}b", self.pid)
    }

    fn port(&self, node: u8) -> String {
        format!("{LINK_PREFIX}{}v{node}", self.pid)
    }

    /// The namespace of `node`.
    pub fn namespace(&self, node: u8) -> String {
        format!("{NS_PREFIX}{}-n{node}", self.pid)
    }

    /// The harness's address on the bridge.
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, 1)
    }

    /// Node `node`'s own address, inside its namespace.
    pub fn node_ip(&self, node: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, 10 + node)
    }

    /// The proxy's stand-in for `node` (root namespace): peers dial it, and the proxy sends
    /// from it.
    pub fn alias_ip(&self, node: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, 100 + node)
    }

    /// Takes node `node`'s link down (`up == false`: cut off from everything) or up.
    pub fn set_link(&self, node: u8, up: bool) -> Result<(), String> {
        let state = if up { "up" } else { "down" };
        sh("ip", &["link", "set", &self.port(node), state]).map(|_| ())
    }

    /// Inside `node`'s namespace, drops every packet from (`inbound`) and to (`outbound`) the
    /// stand-ins of `peers` and their own addresses: the replication links between them are
    /// cut, one way or both. (Members dial each other's stand-ins, except once a membership
    /// change recorded the members: the metadata leader of that moment records its own
    /// replication address as it advertises it, its own address, which the others then dial
    /// directly.)
    pub fn nft_block(
        &self,
        node: u8,
        peers: &[u8],
        inbound: bool,
        outbound: bool,
    ) -> Result<(), String> {
        let set = peers
            .iter()
            .flat_map(|&p| [self.alias_ip(p).to_string(), self.node_ip(p).to_string()])
            .collect::<Vec<_>>()
            .join(", ");
        let mut script = String::from(
            "table inet eddy_chaos {\n\
             chain input { type filter hook input priority 0; policy accept; }\n\
             chain output { type filter hook output priority 0; policy accept; }\n}\n",
        );
        if inbound {
            script += &[
                "add rule inet eddy_chaos input ip saddr { ",
                &set,
                " } drop\n",
            ]
            .concat();
        }
        if outbound {
            script += &[
                "add rule inet eddy_chaos output ip daddr { ",
                &set,
                " } drop\n",
            ]
            .concat();
        }
        sh_stdin(
            "ip",
            &["netns", "exec", &self.namespace(node), "nft", "-f", "-"],
            &script,
        )
    }

    /// Removes `node`'s drop rules (a no-op when it has none).
    pub fn nft_heal(&self, node: u8) {
        let _ = sh(
            "ip",
            &[
                "netns",
                "exec",
                &self.namespace(node),
                "nft",
                "delete",
                "table",
                "inet",
                "eddy_chaos",
            ],
        );
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        teardown(self.pid);
    }
}

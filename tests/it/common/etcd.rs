// etcd members on 127.0.0.1 for the tests, each over a data folder of its own in one temporary
// directory: started together as one cluster, killed, stopped (SIGSTOP) or restarted one by
// one, and all killed when dropped.
//
// The one etcd launcher of the crate: the integration tests (`tests/it`, as `common::etcd`) and
// the unit tests of the etcd client (`src/cluster/etcd.rs`, through `include!`) both compile
// this file, so it needs nothing but std and `tempfile`, and its opening is a plain comment
// (an included file may not hold inner attributes, nor so `//!` docs). It has no client of its
// own: whoever starts members says how to tell that one serves (a closure given the member's
// client address), with the client it already has.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a started member has to serve.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether the member at a client address serves. Called from a blocking context (the thread
/// that starts the members), repeatedly until it answers `true`.
type Ready = Box<dyn Fn(SocketAddr) -> bool + Send>;

/// An etcd cluster of one member or several on 127.0.0.1; killed when dropped.
pub struct Etcd {
    members: Vec<Member>,
    /// Each member's client address, in member order.
    pub clients: Vec<SocketAddr>,
    /// The client URLs, comma-separated (`cluster.etcd_endpoints`).
    pub endpoint: String,
    ready: Ready,
    dir: TempDir,
}

/// One member: how to start it (again, over the same data folder), and its process while it
/// runs.
struct Member {
    args: Vec<String>,
    log: PathBuf,
    process: Option<Child>,
}

impl Etcd {
    /// A cluster of `count` members, once each serves as `ready` tells.
    ///
    /// # Panics
    ///
    /// When `etcd` cannot be started, or a member exits or does not serve within 30 s (the
    /// message holds its log).
    pub fn start(count: usize, ready: impl Fn(SocketAddr) -> bool + Send + 'static) -> Self {
        Self::start_listening(count, None, ready)
    }

    /// [`Etcd::start`], the members listening for clients on address `also` too when given
    /// (on the same ports; see [`Etcd::endpoint_on`]).
    pub fn start_listening(
        count: usize,
        also: Option<&str>,
        ready: impl Fn(SocketAddr) -> bool + Send + 'static,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let ports = free_ports(2 * count);
        let (clients, peers) = ports.split_at(count);
        let initial: Vec<String> = peers
            .iter()
            .enumerate()
            .map(|(n, peer)| format!("m{n}=http://127.0.0.1:{peer}"))
            .collect();
        let members = clients
            .iter()
            .zip(peers)
            .enumerate()
            .map(|(n, (client, peer))| {
                let client_url = format!("http://127.0.0.1:{client}");
                let peer_url = format!("http://127.0.0.1:{peer}");
                let listen = match also {
                    Some(host) => format!("{client_url},http://{host}:{client}"),
                    None => client_url.clone(),
                };
                let data = dir.path().join(format!("m{n}"));
                let args: [&str; 16] = [
                    "--name",
                    &format!("m{n}"),
                    "--data-dir",
                    data.to_str().expect("a UTF-8 temporary directory"),
                    "--listen-client-urls",
                    &listen,
                    "--advertise-client-urls",
                    &client_url,
                    "--listen-peer-urls",
                    &peer_url,
                    "--initial-advertise-peer-urls",
                    &peer_url,
                    "--initial-cluster",
                    &initial.join(","),
                    "--initial-cluster-state",
                    "new",
                ];
                let log = dir.path().join(format!("m{n}.log"));
                let mut member = Member {
                    args: args.map(str::to_owned).into(),
                    log,
                    process: None,
                };
                member.spawn();
                member
            })
            .collect();
        let clients: Vec<SocketAddr> = clients
            .iter()
            .map(|client| SocketAddr::from(([127, 0, 0, 1], *client)))
            .collect();
        let endpoint = clients
            .iter()
            .map(|addr| format!("http://{addr}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Self {
            members,
            clients,
            endpoint,
            ready: Box::new(ready),
            dir,
        };
        // A member serves only once a quorum runs: every member is started before any is
        // waited for.
        let deadline = Instant::now() + START_TIMEOUT;
        for member in 0..count {
            if let Err(why) = etcd.wait_ready(member, deadline) {
                let log = std::fs::read_to_string(&etcd.members[member].log).unwrap_or_default();
                panic!("{why}:\n{log}");
            }
        }
        etcd
    }

    /// The client URLs on address `host`, which the members listen on too (see
    /// [`Etcd::start_listening`]).
    pub fn endpoint_on(&self, host: &str) -> String {
        self.clients
            .iter()
            .map(|addr| format!("http://{host}:{}", addr.port()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills member `member` (SIGKILL) and reaps it; its data folder stays, for
    /// [`Etcd::restart`].
    pub fn kill(&mut self, member: usize) {
        if let Some(mut process) = self.members[member].process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// Starts member `member` again over its data folder (killing it first if it runs):
    /// whether it serves within 30 s.
    pub fn restart(&mut self, member: usize) -> bool {
        self.kill(member);
        self.members[member].spawn();
        self.wait_ready(member, Instant::now() + START_TIMEOUT)
            .is_ok()
    }

    /// Sends signal `name` (`STOP`, `CONT`) to member `member`: a stopped member answers
    /// nothing, as a hung or cut-off one.
    pub fn signal(&self, member: usize, name: &str) {
        let process = self.members[member].process.as_ref();
        let pid = process.expect("a running member").id();
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{name} etcd member {member}");
    }

    /// Waits until member `member` serves; why not, once it exited or `deadline` passed.
    fn wait_ready(&mut self, member: usize, deadline: Instant) -> Result<(), String> {
        let addr = self.clients[member];
        let dir = self.dir.path().display();
        loop {
            if (self.ready)(addr) {
                return Ok(());
            }
            let process = self.members[member].process.as_mut();
            let exited = process.and_then(|process| process.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(format!("etcd at {addr} (in {dir}) exited ({status})"));
            }
            if Instant::now() > deadline {
                return Err(format!("etcd at {addr} (in {dir}) did not serve in time"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Member {
    /// Starts the process, its standard error appended to its log.
    fn spawn(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("an etcd log file");
        let process = Command::new("etcd")
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd (scripts/install-etcd installs it)");
        self.process = Some(process);
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for member in 0..self.members.len() {
            self.kill(member);
        }
    }
}

/// `count` distinct free TCP ports of 127.0.0.1 (free when asked: each is held until all are
/// chosen, and the process that binds it next gets it).
fn free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    listeners
        .iter()
        .map(|listener| listener.local_addr().expect("a bound address").port())
        .collect()
}

// etcd members on 127.0.0.1 for the tests, each over a data folder of its own in one temporary
// directory: started together as one cluster, killed, stopped (SIGSTOP) or restarted one by
// one, and all killed when dropped.
//
// The one etcd launcher of the crate: the integration tests (`tests/it`, as `common::etcd`) and
// the unit tests of the etcd client (`src/cluster/etcd.rs`, through `include!`) both compile
// this file, so it needs nothing but std and `tempfile`, and its opening is a plain comment
// (an included file may not hold inner attributes, nor so `//!` docs). It has no client of its
// own: whoever starts members says how to tell that one serves (a closure given the member's
// client address), with the client it already has. Members may serve their clients over TLS
// ([`Options::tls`], peers stay plain HTTP), and have authentication turned on once started
// ([`Etcd::enable_auth`], through `curl`).

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
    /// The members' TLS on their client URLs, if any.
    tls: Option<ServerTls>,
    ready: Ready,
    dir: TempDir,
}

/// How members start, beyond what [`Etcd::start`] gives every one.
#[derive(Default)]
pub struct Options {
    /// Another address the members listen for clients on, on the same ports (see
    /// [`Etcd::endpoint_on`]).
    pub also: Option<String>,
    /// TLS on the client URLs, which then are `https://`.
    pub tls: Option<ServerTls>,
    /// More arguments for every member, such as `--auth-token-ttl 1`.
    pub args: Vec<String>,
}

/// The members' TLS on their client URLs, from PEM files.
#[derive(Clone)]
pub struct ServerTls {
    /// The members' certificate (`--cert-file`), for 127.0.0.1.
    pub cert_file: PathBuf,
    /// Its key (`--key-file`).
    pub key_file: PathBuf,
    /// The CA that signed the members' certificate, which [`Etcd::enable_auth`] trusts.
    pub ca_file: PathBuf,
    /// Whether a client must show a certificate the CA signed (`--client-cert-auth` and
    /// `--trusted-ca-file`: etcd 3.4 asks every client for one once given a CA).
    pub client_cert_auth: bool,
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
        let options = Options {
            also: also.map(str::to_owned),
            ..Options::default()
        };
        Self::start_with(count, options, ready)
    }

    /// [`Etcd::start`], the members started as `options` say. With [`Options::tls`], `ready`
    /// must ask over TLS.
    pub fn start_with(
        count: usize,
        options: Options,
        ready: impl Fn(SocketAddr) -> bool + Send + 'static,
    ) -> Self {
        let scheme = scheme(options.tls.as_ref());
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
                let client_url = format!("{scheme}://127.0.0.1:{client}");
                let peer_url = format!("http://127.0.0.1:{peer}");
                let listen = match &options.also {
                    Some(host) => format!("{client_url},{scheme}://{host}:{client}"),
                    None => client_url.clone(),
                };
                let data = dir.path().join(format!("m{n}"));
                let mut args: Vec<String> = [
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
                ]
                .map(str::to_owned)
                .into();
                if let Some(tls) = &options.tls {
                    let path = |path: &PathBuf| path.to_str().expect("a UTF-8 path").to_owned();
                    args.extend([
                        "--cert-file".to_owned(),
                        path(&tls.cert_file),
                        "--key-file".to_owned(),
                        path(&tls.key_file),
                    ]);
                    if tls.client_cert_auth {
                        args.extend([
                            "--client-cert-auth".to_owned(),
                            "--trusted-ca-file".to_owned(),
                            path(&tls.ca_file),
                        ]);
                    }
                }
                args.extend(options.args.iter().cloned());
                let log = dir.path().join(format!("m{n}.log"));
                let mut member = Member {
                    args,
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
            .map(|addr| format!("{scheme}://{addr}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Self {
            members,
            clients,
            endpoint,
            tls: options.tls,
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
            .map(|addr| format!("{}://{host}:{}", scheme(self.tls.as_ref()), addr.port()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Turns authentication on: adds user `root` with `password` (which needs no JSON escape),
    /// grants it role `root`, and enables authentication, through member 0 with `curl`
    /// (scripts/install-tls-tools), showing the members' own certificate when they ask for a
    /// client's. From then on, a request needs the user's token: a `ready` that asks without
    /// one no longer passes, so [`Etcd::restart`] fails.
    ///
    /// # Panics
    ///
    /// When `curl` cannot be run, or etcd refuses a step.
    pub fn enable_auth(&self, password: &str) {
        let user = format!(r#"{{"name":"root","password":"{password}"}}"#);
        let steps = [
            ("/v3/auth/user/add", user.as_str()),
            ("/v3/auth/user/grant", r#"{"user":"root","role":"root"}"#),
            ("/v3/auth/enable", "{}"),
        ];
        for (path, body) in steps {
            let mut curl = Command::new("curl");
            curl.args(["--silent", "--show-error", "--fail", "--max-time", "10"])
                .args(["--data", body]);
            if let Some(tls) = &self.tls {
                curl.arg("--cacert").arg(&tls.ca_file);
                if tls.client_cert_auth {
                    curl.arg("--cert").arg(&tls.cert_file);
                    curl.arg("--key").arg(&tls.key_file);
                }
            }
            let url = format!("{}://{}{path}", scheme(self.tls.as_ref()), self.clients[0]);
            let done = curl
                .arg(&url)
                .output()
                .expect("curl (scripts/install-tls-tools)");
            assert!(
                done.status.success(),
                "{url}: {}",
                String::from_utf8_lossy(&done.stderr)
            );
        }
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

/// The client URLs' scheme.
pub fn scheme(tls: Option<&ServerTls>) -> &'static str {
    if tls.is_some() { "https" } else { "http" }
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

// Certificates for the tests, made with `openssl` (see scripts/install-tls-tools) in a
// temporary folder: two CAs, and certificates of each kind the TLS tests need.
//
// Compiled by the integration tests (`tests/it`, as `common::pki`) and by the unit tests of
// the etcd client (`src/cluster/etcd.rs`, through `include!`), so it needs nothing but std and
// `tempfile`, and its opening is a plain comment.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Certificates made with `openssl` in a folder: two CAs, and certificates of each kind the
/// tests need.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Self {
        let pki = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        for ca in ["ca", "other-ca"] {
            pki.openssl(&[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
            ]);
        }
        std::fs::write(
            pki.path("localhost.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .unwrap();
        std::fs::write(
            pki.path("elsewhere.ext"),
            "subjectAltName=DNS:elsewhere.example\n",
        )
        .unwrap();
        pki.sign("server", "ca", "localhost.ext", "2");
        pki.sign("other-server", "other-ca", "localhost.ext", "2");
        pki.sign("misnamed", "ca", "elsewhere.ext", "2");
        // Valid for no time at all: expired by the time it is used.
        pki.sign("expired", "ca", "localhost.ext", "0");
        pki.sign("client", "ca", "localhost.ext", "2");
        // One certificate per node of a cluster, each a server's and a client's.
        for node in ["node-a", "node-b", "node-c"] {
            pki.sign(node, "ca", "localhost.ext", "2");
        }
        std::thread::sleep(Duration::from_millis(1100));
        pki
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn openssl(&self, args: &[&str]) {
        let made = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("openssl (scripts/install-tls-tools)");
        assert!(made.status.success(), "openssl {args:?}: {made:?}");
    }

    /// `name.pem` and `name.key`, signed by `ca` with the extensions in `ext`.
    pub fn sign(&self, name: &str, ca: &str, ext: &str, days: &str) {
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            &key,
            "-out",
            &csr,
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            days,
            "-extfile",
            ext,
            "-out",
            &pem,
        ]);
    }

    /// Makes `name`'s certificate the one the server reads (`server-now.pem` and `.key`).
    pub fn serve(&self, name: &str) {
        for kind in ["pem", "key"] {
            let staged = self.path(&format!("staged.{kind}"));
            std::fs::copy(self.path(&format!("{name}.{kind}")), &staged).unwrap();
            std::fs::rename(staged, self.path(&format!("server-now.{kind}"))).unwrap();
        }
    }
}

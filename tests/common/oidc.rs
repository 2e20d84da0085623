//! The OpenID provider the tests start (tests/oidc/login_provider.py: discovery, JWKS, code +
//! PKCE, the device grant, refresh; HTTPS with a CA of its own), killed when dropped.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Python with PyJWT and cryptography (scripts/setup.sh's target/pyjwt).
pub fn python() -> PathBuf {
    std::env::var("TOOLGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repository().join("target/pyjwt/bin/python"))
}

/// The repository the tests were built from.
pub fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub struct Provider {
    child: Child,
    pub dir: PathBuf,
    pub issuer: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    /// The provider serving from `dir` (made afresh); `people`, when given, is who may sign in
    /// (LOGIN_PROVIDER_PEOPLE: a list of {"username", "tenant", "roles"}).
    pub fn start(dir: &Path, people: Option<&Value>) -> Provider {
        let _ = std::fs::remove_dir_all(dir);
        let mut command = Command::new(python());
        command.arg(repository().join("tests/oidc/login_provider.py")).arg("serve").arg(dir).stderr(Stdio::null());
        if let Some(people) = people {
            command.env("LOGIN_PROVIDER_PEOPLE", people.to_string());
        }
        let child =
            command.spawn().unwrap_or_else(|e| panic!("{}: {e} (scripts/setup.sh installs it)", python().display()));
        let started = Instant::now();
        let issuer = loop {
            if let Ok(issuer) = std::fs::read_to_string(dir.join("issuer")) {
                break issuer.trim().to_string();
            }
            assert!(started.elapsed() < Duration::from_secs(30), "the provider did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        Provider { child, dir: dir.to_path_buf(), issuer }
    }

    /// A file the provider wrote in its directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

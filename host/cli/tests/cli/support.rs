//! Helpers every test file of this binary uses.

use std::path::{Path, PathBuf};
use std::process::Child;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A child process killed (and reaped) when the test ends, passing or not.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP port free on loopback right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `joinery sim serve ARGS` and returns it with the lines it printed up to its
/// "press Ctrl-C" line. Its stdout keeps being read afterwards: a closed pipe would make the
/// server's next line kill it.
pub fn sim_serve(args: &[&std::ffi::OsStr]) -> (KillOnDrop, Vec<String>) {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(["sim", "serve"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let server = KillOnDrop(child);
    let mut printed = Vec::new();
    for line in stdout.by_ref().map_while(Result::ok) {
        let last = line.starts_with("press Ctrl-C");
        printed.push(line);
        if last {
            break;
        }
    }
    std::thread::spawn(move || stdout.for_each(drop));
    (server, printed)
}

/// The value after `label` on the first printed line that starts with it (leading spaces
/// ignored), e.g. `printed_value(&lines, "simulated cloud:")`.
pub fn printed_value(lines: &[String], label: &str) -> Option<String> {
    lines
        .iter()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .map(|v| v.trim().to_string())
}

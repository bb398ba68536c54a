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

/// Runs `joinery ARGS…` from the repository's root: whether it succeeded, its stdout and
/// its stderr.
pub fn joinery<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// `GET path` on a loopback port (HTTP/1.1, closed after the answer): the whole answer,
/// status line and headers included, or `None` when nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    Some(out)
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

/// Runs `kubectl --kubeconfig KUBECONFIG ARGS`, with `stdin` fed to it when given; returns
/// whether it succeeded, its stdout and its stderr.
pub fn kubectl_output(
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// [`kubectl_output`] with stdout and stderr together.
pub fn kubectl_with_input(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let (ok, stdout, stderr) = kubectl_output(kubeconfig, args, stdin);
    (ok, format!("{stdout}{stderr}"))
}

/// [`kubectl_with_input`] without input.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    kubectl_with_input(kubeconfig, args, None)
}

/// `kubectl … -o json`, parsed; fails the test when kubectl fails.
pub fn kubectl_json(kubeconfig: &Path, args: &[&str]) -> serde_json::Value {
    kubectl_json_or_null(kubeconfig, args).unwrap_or_else(|out| panic!("kubectl {args:?}: {out}"))
}

/// `kubectl … -o json`, parsed; what kubectl printed when it fails (an object not there yet,
/// while polling).
pub fn kubectl_json_or_null(kubeconfig: &Path, args: &[&str]) -> Result<serde_json::Value, String> {
    let (ok, out) = kubectl(kubeconfig, &[args, &["-o", "json"]].concat());
    if !ok {
        return Err(out);
    }
    serde_json::from_str(&out).map_err(|e| format!("no JSON ({e}): {out}"))
}

/// Polls `check` every 200 ms until it holds, failing with `what` after `limit`: a deadline
/// for liveness only, nothing asserts how fast anything happens.
pub fn eventually(limit: std::time::Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !check() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

//! `joinery bench controller`: `joinery run` as its own process against `joinery sim serve`
//! holding a large static cluster, as an operator would run them: how much memory the
//! controller needs to hold the cluster, how long its first sync takes, what it costs idle,
//! and how long a burst of pending pods waits for its NodeClaims.
//!
//! Both processes are this executable. The server is preloaded (`--preload-nodes`,
//! `--preload-pods`: a tainted node group no autoscaler manages, full of Running pods), the
//! bench applies a NodePool and a SimNodeClass, starts `joinery run` with a grants file for
//! the simulated cloud, a plugin cache directory that `joinery plugins compile` has just
//! filled and `MIMALLOC_PURGE_DELAY=0` (as the container image and the Helm chart run it: the
//! cache an `emptyDir` the chart's init container compiles the plugins into, so the
//! controller runs them from the cache's files and never compiles), waits for
//! `karpenter_cluster_state_synced 1`, then creates the burst
//! as bare pods the static nodes cannot take, and waits until every pod has a `Nominated`
//! event (the provisioner emits it once the pod's NodeClaim exists) or is bound to a node. The controller's memory and
//! CPU time come from `/proc/<pid>`, its passes from its own metrics.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use joinery_emulator::preload::STATIC_TAINT_KEY;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Serialize;
use serde_json::json;

use crate::commands::Execute;

/// `joinery bench controller …`
#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    /// Static nodes preloaded into the emulated cluster.
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
    /// Running pods preloaded onto them.
    #[arg(long, default_value_t = 50000)]
    pub pods: usize,
    /// Pending pods in the burst (250m CPU, 512Mi each).
    #[arg(long, default_value_t = 1000)]
    pub pending: usize,
    /// Seconds the idle controller is watched for its CPU use and resident memory.
    #[arg(long, default_value_t = 10)]
    pub idle_seconds: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl Execute for ControllerArgs {
    async fn execute(self) -> Result<ExitCode> {
        let report = measure(&self).await?;
        if self.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print_report(&report);
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// What the bench measured (the `--json` output; keep the names stable).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ControllerReport {
    nodes: usize,
    pods: usize,
    pending: usize,
    /// Seconds from `joinery run` starting to its cluster state being synced.
    sync_seconds: f64,
    /// The controller's resident memory once synced, idle (the median of samples taken four
    /// times a second; and their highest), after the burst, and its peak (MiB).
    rss_synced_mib: Option<f64>,
    rss_idle_mib: Option<f64>,
    rss_idle_max_mib: Option<f64>,
    rss_after_burst_mib: Option<f64>,
    peak_rss_mib: Option<f64>,
    /// The controller's CPU use while idle, in percent of one core.
    idle_cpu_percent: Option<f64>,
    /// Seconds to create the burst's pods.
    burst_create_seconds: f64,
    /// Seconds from the last pod of the burst created to the last of them nominated for a
    /// NodeClaim (the provisioner batches for `BATCH_IDLE_DURATION` first).
    burst_to_nodeclaims_seconds: f64,
    /// NodeClaims created for the burst.
    nodeclaims: usize,
    /// Provisioning passes during the burst, and their mean duration from the controller's
    /// `karpenter_scheduler_scheduling_duration_seconds`.
    passes: u64,
    mean_pass_seconds: Option<f64>,
    /// The controller's CPU time during the burst divided by its passes.
    cpu_seconds_per_pass: Option<f64>,
    /// The emulated API server's resident memory at the end (MiB).
    server_rss_mib: Option<f64>,
}

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`), as MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    let kib: f64 = line[field.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// User plus system CPU seconds of process `pid` (`/proc/<pid>/stat`, clock ticks of 1/100 s).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// A free TCP port on loopback.
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port())
}

/// The body of `GET path` on a loopback port, if it answers.
fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    Some(body)
}

/// The sum over label sets of a metric's samples named `name` in a Prometheus text page.
fn metric_sum(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| {
            l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{' | b' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `joinery sim serve` with the preload, its API server and simulated cloud URLs once it
/// wrote the kubeconfig.
fn start_server(
    exe: &Path,
    dir: &Path,
    args: &ControllerArgs,
) -> Result<(Process, String, String)> {
    let kubeconfig = dir.join("kubeconfig");
    let mut child = Command::new(exe)
        .args(["sim", "serve", "--speed", "1", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .args([
            "--preload-nodes",
            &args.nodes.to_string(),
            "--preload-pods",
            &args.pods.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start joinery sim serve")?;
    let stdout = child.stdout.take().context("sim serve has no stdout")?;
    let server = Process(child);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Keep draining stdout for the server's whole life.
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = sender.send(line);
        }
    });
    let (mut api, mut cloud) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let line = receiver
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .context("joinery sim serve stopped or took over 10 minutes to load the cluster")?;
        if let Some(url) = line.strip_prefix("emulated API server:") {
            api = Some(url.trim().to_string());
        } else if let Some(url) = line.strip_prefix("simulated cloud:") {
            cloud = Some(url.trim().to_string());
        } else if line.starts_with("kubeconfig written") {
            break;
        }
    }
    match (api, cloud) {
        (Some(api), Some(cloud)) => Ok((server, api, cloud)),
        _ => bail!("joinery sim serve did not print its API server and simulated cloud URLs"),
    }
}

async fn measure(args: &ControllerArgs) -> Result<ControllerReport> {
    let exe = std::env::current_exe().context("cannot find the joinery executable")?;
    let dir = std::env::temp_dir().join(format!("joinery-bench-controller-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let result = measure_in(&exe, &dir, args).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn measure_in(exe: &Path, dir: &Path, args: &ControllerArgs) -> Result<ControllerReport> {
    eprintln!(
        "loading {} static nodes and {} pods into joinery sim serve…",
        args.nodes, args.pods
    );
    let (server, api_url, cloud_url) = start_server(exe, dir, args)?;
    let kubeconfig_path = dir.join("kubeconfig");
    let kubeconfig = Kubeconfig::read_from(&kubeconfig_path)
        .context("cannot read the emulated cluster's kubeconfig")?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = joinery_controller::api_client::client(config)?;
    apply_nodepool(&client).await?;

    let grants = dir.join("grants.yaml");
    std::fs::write(
        &grants,
        format!(
            "plugins:\n  simcloud:\n    http: [{cloud_url:?}]\n    config: {{endpoint: {cloud_url:?}, clusterName: joinery}}\n"
        ),
    )?;
    // The chart's init container.
    let compiled = Command::new(exe)
        .args(["plugins", "compile"])
        .env(
            joinery_runtime::engine::PLUGIN_CACHE_ENV,
            dir.join("plugin-cache"),
        )
        .stdout(Stdio::null())
        .output()
        .context("cannot start joinery plugins compile")?;
    if !compiled.status.success() {
        bail!(
            "joinery plugins compile failed ({}):\n{}",
            compiled.status,
            String::from_utf8_lossy(&compiled.stderr).trim_end()
        );
    }
    let (metrics, health) = (free_port()?, free_port()?);
    let log = std::fs::File::create(dir.join("controller.log"))?;
    let started = Instant::now();
    let controller = Process(
        Command::new(exe)
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig_path)
            .arg("--grants")
            .arg(&grants)
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", health.to_string())
            .env("SYSTEM_NAMESPACE", "default")
            .env("POD_NAME", "joinery-bench")
            .env("CLUSTER_ENDPOINT", &api_url)
            .env("LOG_LEVEL", "error")
            .env(
                joinery_runtime::engine::PLUGIN_CACHE_ENV,
                dir.join("plugin-cache"),
            )
            .env("MIMALLOC_PURGE_DELAY", "0")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("cannot start joinery run")?,
    );
    let mut controller = controller;
    let pid = controller.0.id();
    eprintln!("waiting for joinery run to sync…");
    let synced = loop {
        if http_get(metrics, "/metrics")
            .is_some_and(|page| metric_sum(&page, "karpenter_cluster_state_synced") >= 1.0)
        {
            break started.elapsed();
        }
        if let Ok(Some(status)) = controller.0.try_wait() {
            let log = std::fs::read_to_string(dir.join("controller.log")).unwrap_or_default();
            bail!(
                "joinery run exited ({status}) before syncing:\n{}",
                log.trim_end()
            );
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("joinery run did not sync within 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let rss_synced = status_mib(pid, "VmRSS");

    eprintln!(
        "synced in {:.1} s; watching it idle for {} s…",
        synced.as_secs_f64(),
        args.idle_seconds
    );
    let cpu_before = cpu_seconds(pid);
    // Resident memory sampled four times a second while idle: a disruption pass (every 10 s)
    // lifts it for a moment, so one sample reads high or low by chance; the median does not.
    let idle_until = Instant::now() + Duration::from_secs(args.idle_seconds);
    let mut idle_samples = Vec::new();
    while Instant::now() < idle_until {
        idle_samples.extend(status_mib(pid, "VmRSS"));
        tokio::time::sleep(
            Duration::from_millis(250).min(idle_until.saturating_duration_since(Instant::now())),
        )
        .await;
    }
    let idle_cpu = cpu_seconds(pid)
        .zip(cpu_before)
        .map(|(after, before)| (after - before) / args.idle_seconds as f64 * 100.0);
    idle_samples.sort_by(f64::total_cmp);
    let rss_idle = idle_samples.get(idle_samples.len() / 2).copied();
    let rss_idle_max = idle_samples.last().copied();

    eprintln!("creating {} pending pods…", args.pending);
    let page_before = http_get(metrics, "/metrics").unwrap_or_default();
    let cpu_before = cpu_seconds(pid);
    let burst_started = Instant::now();
    create_burst(&client, args.pending, args.nodes).await?;
    let burst_created = burst_started.elapsed();
    let created_at = Instant::now();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let burst: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nominated = loop {
        // A pod of the burst has its NodeClaim once it is nominated for it, or bound to its
        // node (the emulated scheduler can bind it before the provisioner's event is listed).
        let listed = events
            .list(&ListParams::default().fields("reason=Nominated"))
            .await?;
        let mut served: std::collections::BTreeSet<String> = listed
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Nominated"))
            .filter_map(|e| e.involved_object.name.clone())
            .collect();
        let bound = burst
            .list(&ListParams::default().labels("app=burst"))
            .await?;
        served.extend(
            bound
                .items
                .into_iter()
                .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                .filter_map(|p| p.metadata.name),
        );
        let count = served.len();
        if count >= args.pending {
            break created_at.elapsed();
        }
        if created_at.elapsed() > Duration::from_secs(600) {
            bail!(
                "only {count} of {} pods were nominated for a NodeClaim or bound within 10 minutes",
                args.pending
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let page_after = http_get(metrics, "/metrics").unwrap_or_default();
    let burst_cpu = cpu_seconds(pid)
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    let name = "karpenter_scheduler_scheduling_duration_seconds";
    let passes = (metric_sum(&page_after, &format!("{name}_count"))
        - metric_sum(&page_before, &format!("{name}_count")))
    .max(0.0) as u64;
    let pass_seconds = metric_sum(&page_after, &format!("{name}_sum"))
        - metric_sum(&page_before, &format!("{name}_sum"));
    let nodeclaims: Api<kube::core::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource {
            group: "karpenter.sh".into(),
            version: "v1".into(),
            api_version: "karpenter.sh/v1".into(),
            kind: "NodeClaim".into(),
            plural: "nodeclaims".into(),
        },
    );
    let claims = nodeclaims.list(&ListParams::default()).await?.items.len();
    let report = ControllerReport {
        nodes: args.nodes,
        pods: args.pods,
        pending: args.pending,
        sync_seconds: synced.as_secs_f64(),
        rss_synced_mib: rss_synced,
        rss_idle_mib: rss_idle,
        rss_idle_max_mib: rss_idle_max,
        rss_after_burst_mib: status_mib(pid, "VmRSS"),
        peak_rss_mib: status_mib(pid, "VmHWM"),
        idle_cpu_percent: idle_cpu,
        burst_create_seconds: burst_created.as_secs_f64(),
        burst_to_nodeclaims_seconds: nominated.as_secs_f64(),
        nodeclaims: claims,
        passes,
        mean_pass_seconds: (passes > 0).then(|| pass_seconds / passes as f64),
        cpu_seconds_per_pass: burst_cpu
            .filter(|_| passes > 0)
            .map(|cpu| cpu / passes as f64),
        server_rss_mib: status_mib(server.0.id(), "VmRSS"),
    };
    drop(controller);
    drop(server);
    Ok(report)
}

/// The NodePool and SimNodeClass the burst provisions from (on-demand amd64, the simulated
/// cloud's `c` family; consolidation off, so that nothing but provisioning runs).
async fn apply_nodepool(client: &kube::Client) -> Result<()> {
    let objects = [
        json!({
            "apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": "default"},
            "spec": {"userDataRenderer": {"name": "k3s", "parameters": {"token": "bench", "providerIDCommand": "cat /var/lib/simcloud/instance-id"}}},
        }),
        json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {
                "template": {"spec": {
                    "nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "simcloud.joinery.dev/instance-family", "operator": "In", "values": ["c"]},
                    ],
                }},
                "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
            },
        }),
    ];
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let (group, version) = object["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split_once('/')
            .unwrap_or_default();
        let resource = kube::discovery::ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: format!("{group}/{version}"),
            plural: format!("{}s", kind.to_lowercase()).replace("nodeclasss", "nodeclasses"),
            kind: kind.clone(),
        };
        let api: Api<kube::core::DynamicObject> = Api::all_with(client.clone(), &resource);
        let object: kube::core::DynamicObject = serde_json::from_value(object)?;
        api.create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("cannot create the bench's {kind}"))?;
    }
    Ok(())
}

/// Creates `count` bare pods in `default` (16 requests in flight) that only the NodePool can
/// take (they do not tolerate the static nodes' taint), each marked unschedulable as
/// kube-scheduler would.
async fn create_burst(client: &kube::Client, count: usize, nodes: usize) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    futures::stream::iter(0..count)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("burst-{i:05}"), "labels": {"app": "burst"}},
                    "spec": {"containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}]},
                }))?;
                let name = format!("burst-{i:05}");
                pods.create(&PostParams::default(), &pod).await.context("cannot create a pod of the burst")?;
                // kube-scheduler's verdict, written at once: the controller acts on pods marked
                // unschedulable, and the bench measures the controller, not the emulated
                // scheduler's pace over a cluster this size.
                let verdict = json!({"status": {"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": format!("0/{nodes} nodes are available: {nodes} node(s) had untolerated taint {{{STATIC_TAINT_KEY}: true}}."),
                    "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                }]}});
                pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&verdict)).await.context("cannot mark a pod of the burst unschedulable")?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

fn print_report(r: &ControllerReport) {
    let mib = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.0} MiB"));
    println!(
        "controller benchmark: joinery run against joinery sim serve holding {} static nodes and {} running pods",
        r.nodes, r.pods
    );
    println!(
        "  first sync (start → cluster state synced)   {:>9.1} s",
        r.sync_seconds
    );
    println!(
        "  controller RSS synced / idle / after burst   {} / {} / {}",
        mib(r.rss_synced_mib),
        mib(r.rss_idle_mib),
        mib(r.rss_after_burst_mib)
    );
    println!(
        "  controller RSS idle (median of samples)      {} (target ≤ 100 MB = 95 MiB)",
        mib(r.rss_idle_mib)
    );
    println!(
        "  controller RSS idle, highest sample          {}",
        mib(r.rss_idle_max_mib)
    );
    println!(
        "  controller peak RSS (passes and scrapes)     {}",
        mib(r.peak_rss_mib)
    );
    println!(
        "  idle CPU                                     {}",
        r.idle_cpu_percent
            .map_or("—".into(), |c| format!("{c:.1} % of a core"))
    );
    println!(
        "  burst: {} pending pods created in             {:>9.2} s",
        r.pending, r.burst_create_seconds
    );
    println!(
        "  burst → every pod nominated for a NodeClaim  {:>9.2} s ({} NodeClaims)",
        r.burst_to_nodeclaims_seconds, r.nodeclaims
    );
    println!(
        "  provisioning passes during the burst         {} (mean {}; CPU per pass {})",
        r.passes,
        r.mean_pass_seconds
            .map_or("—".into(), |s| format!("{:.0} ms", s * 1e3)),
        r.cpu_seconds_per_pass
            .map_or("—".into(), |s| format!("{:.0} ms", s * 1e3)),
    );
    println!(
        "  emulated API server RSS                      {}",
        mib(r.server_rss_mib)
    );
}

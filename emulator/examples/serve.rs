//! Runs the emulated API server until interrupted and writes its kubeconfig to the path given as
//! the first argument (default: `sim-kubeconfig` in the current directory).

use joinery_emulator::{ApiServer, ApiServerOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sim-kubeconfig".to_string());
    let server = ApiServer::start(ApiServerOptions::default()).await?;
    server.write_kubeconfig(std::path::Path::new(&path))?;
    println!(
        "API server at {}; kubeconfig written to {path}",
        server.url()
    );
    tokio::signal::ctrl_c().await?;
    server.shutdown().await;
    Ok(())
}

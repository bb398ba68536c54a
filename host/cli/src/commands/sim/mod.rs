//! `joinery sim …`: the emulated cluster on its own.

mod serve;

super::subcommands! {
    /// `joinery sim …`
    pub enum SimCommand {
        /// Serve the emulated cluster (API server, physics, simulated cloud) until interrupted.
        Serve(serve::ServeArgs),
    }
}

//! The shared wasmtime engine: configuration, the epoch ticker, and compilation with an
//! optional on-disk cache keyed by component digest and engine compatibility hash.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Component;
use wasmtime::{Config, Engine};

use crate::error::LoadError;

/// How often the epoch advances. Deadlines are expressed in ticks of this length.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// How old a compile-cache entry this process did not write must be before
/// [`PluginEngine::prune_cached`] removes it (an entry this process wrote goes at once).
pub const CACHE_PRUNE_GRACE: Duration = Duration::from_secs(60 * 60);

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Use the pooling instance allocator (faster instantiation; reserves address space).
    pub pooling: bool,
    /// Component instances the pool holds (bounds concurrent calls across all plugins).
    pub pool_instances: u32,
    /// Largest linear memory any call may have, in MiB (per-plugin limits are lower or equal).
    pub max_memory_mib: u32,
    /// Directory of the compiled-component cache; `None` disables it.
    pub cache_dir: Option<PathBuf>,
}

/// The environment variable naming the compiled-component cache directory (what
/// `--plugin-cache-dir` sets on the command line; simulations and test engines read it).
pub const PLUGIN_CACHE_ENV: &str = "JOINERY_PLUGIN_CACHE_DIR";

impl EngineOptions {
    /// The cache directory [`PLUGIN_CACHE_ENV`] names, when it is set and not empty.
    pub fn cache_dir_from_env() -> Option<PathBuf> {
        std::env::var_os(PLUGIN_CACHE_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            pooling: true,
            pool_instances: 64,
            max_memory_mib: 256,
            cache_dir: None,
        }
    }
}

/// A wasmtime engine configured for Joinery plugins, with its epoch ticker.
#[derive(Clone)]
pub struct PluginEngine {
    engine: Engine,
    cache_dir: Option<PathBuf>,
    /// Digests whose cache entry this engine wrote (and has not pruned since).
    written: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    _ticker: Arc<EpochTicker>,
}

impl std::fmt::Debug for PluginEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEngine")
            .field("cache_dir", &self.cache_dir)
            .finish()
    }
}

struct EpochTicker {
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl PluginEngine {
    /// Builds the engine and starts a thread that advances its epoch every [`EPOCH_TICK`].
    pub fn new(options: &EngineOptions) -> Result<PluginEngine, String> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.wasm_component_model(true);
        if options.pooling {
            let mut pool = wasmtime::PoolingAllocationConfig::default();
            let instances = options.pool_instances.max(1);
            pool.total_component_instances(instances)
                .total_core_instances(instances * 8)
                .total_memories(instances * 2)
                .total_tables(instances * 8)
                .total_stacks(instances)
                .max_memories_per_component(4)
                .max_core_instances_per_component(16)
                .max_memory_size(options.max_memory_mib as usize * 1024 * 1024);
            config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&config).map_err(|e| format!("cannot configure wasmtime: {e}"))?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ticking = engine.weak();
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("joinery-epoch".into())
            .spawn(move || {
                while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match ticking.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| format!("cannot start the epoch thread: {e}"))?;
        Ok(PluginEngine {
            engine,
            cache_dir: options.cache_dir.clone(),
            written: Default::default(),
            _ticker: Arc::new(EpochTicker { stop }),
        })
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles a component, using the on-disk cache when configured. A cache entry that
    /// fails to deserialize is treated as a miss and rewritten. Bytes from plugin
    /// directories are never deserialized: only entries this host wrote itself.
    pub fn compile(&self, plugin: &str, digest: &str, wasm: &[u8]) -> Result<Component, LoadError> {
        let cached = self.cache_path(digest);
        if let Some(path) = &cached
            && let Some(component) = self.load_cached(path)
        {
            tracing::debug!(plugin, digest, "compiled component loaded from cache");
            return Ok(component);
        }
        let component = Component::new(&self.engine, wasm).map_err(|e| LoadError::Compile {
            plugin: plugin.to_string(),
            message: format!("{e:#}"),
        })?;
        if let Some(path) = &cached
            && store_cached(path, &component)
        {
            self.written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(digest.to_string());
        }
        if let Some(path) = &cached
            && let Some(stored) = self.load_cached(path)
        {
            // Run the copy just stored: its code is mapped from the file, paged in as it runs
            // and shared with the page cache, instead of the compiled image held in anonymous
            // memory for the process' whole life (tens of MiB of resident memory over a set
            // of plugins).
            return Ok(stored);
        }
        Ok(component)
    }

    /// Where the compiled form of the component with sha256 `digest` is cached for this
    /// engine, or `None` without a cache directory.
    pub fn cache_path(&self, digest: &str) -> Option<PathBuf> {
        self.cache_dir
            .as_ref()
            .map(|dir| dir.join(format!("{digest}-{}.cwasm", self.compatibility_key())))
    }

    /// Removes the cache entry of `digest` for this engine, once the caller no longer loads
    /// that digest (the registry calls it after a reload for every digest it dropped).
    /// Whether an entry was removed.
    ///
    /// The cache directory may be shared: by `joinery plugins compile` and the host it
    /// prepared, by a restarted process, and in tests (`./dev test` points every test's
    /// processes at one `target/plugin-cache`). So pruning is narrow:
    ///
    /// - It removes exactly one file, [`PluginEngine::cache_path`] of `digest`: this engine's
    ///   compatibility key and the cache's own naming. The directory is never listed, so an
    ///   operator's file, another wasmtime's entry or a write in flight is never touched.
    /// - An entry this engine wrote goes at once: this process made it for a plugin it then
    ///   replaced. An entry it only read (written by another process) goes only once its
    ///   file is older than [`CACHE_PRUNE_GRACE`]: a fresh entry is most likely one another
    ///   process has just compiled for itself and is loading now.
    ///
    /// Removing an entry another process still uses is safe, only wasteful: a loaded entry is
    /// mapped, and unlinking a mapped file leaves the mapping whole (entries are only ever
    /// renamed into place, never truncated); the next load of that digest misses, compiles
    /// and writes the entry again.
    pub fn prune_cached(&self, digest: &str) -> bool {
        let Some(path) = self.cache_path(digest) else {
            return false;
        };
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let ours = written.remove(digest);
        let stale = || {
            std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= CACHE_PRUNE_GRACE)
        };
        if !ours && !stale() {
            return false;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove an unused compile-cache entry; it stays");
                false
            }
        }
    }

    fn load_cached(&self, path: &Path) -> Option<Component> {
        if !path.is_file() {
            return None;
        }
        match crate::trusted_cache::deserialize_file(&self.engine, path) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring unusable compile-cache entry");
                None
            }
        }
    }

    /// A short hex key identifying compiled-code compatibility (wasmtime version, config, CPU).
    pub fn compatibility_key(&self) -> String {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.engine
            .precompile_compatibility_hash()
            .hash(&mut hasher);
        format!("{:016x}", hasher.finish())
    }
}

/// Writes `component` to the cache at `path`; whether it was written.
fn store_cached(path: &Path, component: &Component) -> bool {
    let result = component
        .serialize()
        .map_err(|e| e.to_string())
        .and_then(|bytes| {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            }
            // Write a file of this call's own, then rename it into place: a reader never sees half
            // a file, and no writer truncates a file another thread or process renamed into place
            // and may have mapped (which killed it with SIGBUS when two threads of one process
            // shared a temporary name).
            static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = path.with_extension(format!("tmp{}-{write}", std::process::id()));
            std::fs::write(&tmp, bytes).map_err(|e| e.to_string())?;
            std::fs::rename(&tmp, path).map_err(|e| e.to_string())
        });
    if let Err(e) = &result {
        tracing::warn!(path = %path.display(), error = %e, "cannot write compile-cache entry; continuing without it");
    }
    result.is_ok()
}

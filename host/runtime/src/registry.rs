//! The set of loaded plugins, loading from directories, and hot reload.
//!
//! Plugin directories are laid out the way a mounted ConfigMap is: each plugin is a
//! directory holding `plugin.yaml` and its component, possibly through the kubelet's
//! `..data` symlink. A configured directory is either one plugin or a parent of several.
//! Reload validates the whole new set and swaps it atomically; if anything fails, the last
//! good set stays and the error says why. After a swap, the compiled components (and
//! compile-cache entries) of plugins no longer loaded are dropped ([`PluginRegistry`]'s
//! pruning, see [`crate::engine::PluginEngine::prune_cached`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use wasmtime::component::Component;

use crate::error::{CallError, LoadError};
use crate::grants::PluginGrant;
use crate::manifest::{DEFAULT_PRICING_PLUGIN, PluginKind, PluginManifest};
use crate::plugin::{LoadContext, LoadedPlugin, PluginBytes, PluginSource, sha256_hex};

/// Largest component accepted (after decompression), in bytes.
pub const MAX_COMPONENT_BYTES: u64 = 32 * 1024 * 1024;
/// Largest `plugin.yaml` accepted, in bytes.
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024;
/// Name of the manifest file in a plugin directory.
pub const MANIFEST_FILE: &str = "plugin.yaml";

/// An immutable set of loaded plugins, by name.
#[derive(Debug, Default)]
pub struct PluginSet {
    plugins: BTreeMap<String, Arc<LoadedPlugin>>,
}

impl PluginSet {
    /// All plugins, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<LoadedPlugin>> {
        self.plugins.values()
    }

    /// A plugin by name.
    pub fn get(&self, name: &str) -> Option<&Arc<LoadedPlugin>> {
        self.plugins.get(name)
    }

    /// A plugin by name and kind, or an error listing what is loaded.
    pub fn require(&self, name: &str, kind: PluginKind) -> Result<Arc<LoadedPlugin>, CallError> {
        match self.plugins.get(name) {
            Some(p) if p.kind() == kind => Ok(p.clone()),
            _ => Err(CallError::NotFound {
                kind: kind.as_str(),
                name: name.to_string(),
                loaded: self
                    .plugins
                    .values()
                    .filter(|p| p.kind() == kind)
                    .map(|p| p.name().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The pricing plugin for the offerings `cloud` leaves unpriced (see
    /// [`pricing_plugin_name`]), or an error naming it and the loaded pricing plugins.
    pub fn pricing_for(&self, cloud: &LoadedPlugin) -> Result<Arc<LoadedPlugin>, CallError> {
        self.require(
            pricing_plugin_name(cloud.manifest(), cloud.capabilities().grant()),
            PluginKind::Pricing,
        )
    }

    /// The cloud-provider plugin serving a NodeClass kind.
    pub fn cloud_for(&self, group: &str, kind: &str) -> Option<&Arc<LoadedPlugin>> {
        self.plugins.values().find(|p| {
            p.manifest()
                .node_class
                .as_ref()
                .is_some_and(|nc| nc.group == group && nc.kind == kind)
        })
    }

    /// Number of plugins.
    pub fn len(&self) -> usize {
        self.plugins.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }
}

/// The name of the pricing plugin for the offerings a cloud plugin leaves unpriced: the
/// operator's choice (`plugins.<cloud>.pricing` in the grants file), else the one the cloud
/// plugin's manifest names (`pricing`), else [`DEFAULT_PRICING_PLUGIN`].
pub fn pricing_plugin_name<'a>(cloud: &'a PluginManifest, grant: &'a PluginGrant) -> &'a str {
    grant
        .pricing
        .as_deref()
        .or(cloud.pricing.as_deref())
        .unwrap_or(DEFAULT_PRICING_PLUGIN)
}

/// A plugin directory read from disk (not yet compiled).
#[derive(Debug)]
pub struct PluginDir {
    /// The directory.
    pub path: PathBuf,
    /// Parsed manifest.
    pub manifest: PluginManifest,
    /// Component bytes, decompressed.
    pub wasm: Vec<u8>,
}

/// Opens a file of a plugin directory, refusing anything but a regular file (after
/// symlinks, which a mounted ConfigMap uses): a FIFO or a device would block or never end.
fn open_regular(path: &Path, label: &str) -> Result<std::fs::File, LoadError> {
    let io = |source| LoadError::Io {
        plugin: label.to_string(),
        path: path.display().to_string(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket, device or directory); plugin files must be plain files",
        )));
    }
    std::fs::File::open(path).map_err(io)
}

/// Reads one plugin directory: `plugin.yaml` and its (possibly gzipped) component.
pub fn read_plugin_dir(dir: &Path) -> Result<PluginDir, LoadError> {
    let label = dir.display().to_string();
    let io = |path: &Path, source| LoadError::Io {
        plugin: label.clone(),
        path: path.display().to_string(),
        source,
    };
    let manifest_path = dir.join(MANIFEST_FILE);
    let mut text = String::new();
    open_regular(&manifest_path, &label)?
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| io(&manifest_path, e))?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(LoadError::Manifest {
            plugin: manifest_path.display().to_string(),
            message: format!(
                "plugin.yaml is larger than {MAX_MANIFEST_BYTES} bytes; a manifest is a few lines"
            ),
        });
    }
    let manifest = PluginManifest::parse(&text, &manifest_path.display().to_string())?;
    let component_path = dir.join(&manifest.component);
    let file = open_regular(&component_path, &label)?;
    let mut wasm = Vec::new();
    let read = if manifest.component.ends_with(".gz") {
        flate2::read::GzDecoder::new(file)
            .take(MAX_COMPONENT_BYTES + 1)
            .read_to_end(&mut wasm)
    } else {
        file.take(MAX_COMPONENT_BYTES + 1).read_to_end(&mut wasm)
    };
    read.map_err(|e| io(&component_path, e))?;
    if wasm.len() as u64 > MAX_COMPONENT_BYTES {
        return Err(LoadError::Manifest {
            plugin: manifest.name.clone(),
            message: format!(
                "component {} is larger than {MAX_COMPONENT_BYTES} bytes (after decompression)",
                component_path.display()
            ),
        });
    }
    Ok(PluginDir {
        path: dir.to_path_buf(),
        manifest,
        wasm,
    })
}

/// Checks that every configured root is a readable directory: a mistyped `--plugin-dir`
/// must not silently load nothing.
pub fn check_roots(roots: &[PathBuf]) -> Result<(), LoadError> {
    for root in roots {
        let problem = match std::fs::metadata(root) {
            Ok(meta) if meta.is_dir() => match std::fs::read_dir(root) {
                Ok(_) => continue,
                Err(e) => format!("cannot be read: {e}"),
            },
            Ok(_) => "is not a directory".to_string(),
            Err(e) => format!("does not exist or cannot be reached: {e}"),
        };
        return Err(LoadError::PluginDir {
            path: root.display().to_string(),
            message: problem,
        });
    }
    Ok(())
}

/// Lists plugin directories under the configured roots: a root holding `plugin.yaml` is one
/// plugin; otherwise each non-hidden subdirectory holding `plugin.yaml` is one.
pub fn discover(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for root in roots {
        if root.join(MANIFEST_FILE).is_file() {
            found.push(root.clone());
            continue;
        }
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.join(MANIFEST_FILE).is_file())
            .collect();
        dirs.sort();
        found.extend(dirs);
    }
    found
}

/// A cheap fingerprint of the plugin directories: resolved paths, sizes and mtimes of each
/// manifest and component. The kubelet's `..data` swap changes the resolved paths.
pub fn fingerprint(roots: &[PathBuf]) -> String {
    let mut parts = Vec::new();
    for dir in discover(roots) {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            let resolved = std::fs::canonicalize(&path).unwrap_or(path.clone());
            let meta = std::fs::metadata(&path);
            let (len, modified) = meta
                .map(|m| {
                    (
                        m.len(),
                        m.modified()
                            .ok()
                            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()),
                    )
                })
                .unwrap_or((0, None));
            parts.push(format!(
                "{}|{}|{len}|{modified:?}",
                path.display(),
                resolved.display()
            ));
        }
    }
    parts.sort();
    sha256_hex(parts.join("\n").as_bytes())
}

/// Loads and holds the current plugin set; reloads it when the directories change.
pub struct PluginRegistry {
    cx: LoadContext,
    roots: Vec<PathBuf>,
    builtins: Vec<(PluginManifest, &'static [u8])>,
    current: ArcSwap<PluginSet>,
    compiled: Mutex<HashMap<String, Component>>,
    /// Digests of the built-in plugins loaded (never pruned: they ship in the binary).
    builtin_digests: Mutex<HashSet<String>>,
    last_fingerprint: Mutex<String>,
    last_error: Mutex<Option<String>>,
    /// The plugins the last failed reload named (empty when it named none, or succeeded).
    last_failed_plugins: Mutex<Vec<String>>,
}

impl PluginRegistry {
    /// Loads the given built-in plugins and every plugin under `roots`. A directory plugin
    /// replaces a built-in of the same name. Fails if any plugin fails.
    ///
    /// The runtime embeds no plugin: the binary passes the shipped ones
    /// (`joinery_builtin_plugins::builtin_manifests()`), possibly adjusted (a simulation adds
    /// a loopback address to a built-in's requested `http`; the grants still decide what the
    /// plugin may reach), or none.
    pub fn load(
        cx: LoadContext,
        roots: Vec<PathBuf>,
        builtins: Vec<(PluginManifest, &'static [u8])>,
    ) -> Result<PluginRegistry, LoadError> {
        let registry = PluginRegistry {
            cx,
            roots,
            builtins,
            current: ArcSwap::from_pointee(PluginSet::default()),
            compiled: Mutex::new(HashMap::new()),
            builtin_digests: Mutex::new(HashSet::new()),
            last_fingerprint: Mutex::new(String::new()),
            last_error: Mutex::new(None),
            last_failed_plugins: Mutex::new(Vec::new()),
        };
        check_roots(&registry.roots)?;
        let fingerprint = fingerprint(&registry.roots);
        let set = registry.build_set()?;
        registry.current.store(Arc::new(set));
        *registry
            .last_fingerprint
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = fingerprint;
        Ok(registry)
    }

    /// The engine the plugins are compiled with (and its compile cache).
    pub fn engine(&self) -> &crate::engine::PluginEngine {
        &self.cx.engine
    }

    /// Makes `observer` hear of every plugin call from now on, reloaded plugins included.
    pub fn observe_calls(&self, observer: Arc<dyn crate::services::CallObserver>) {
        self.cx.services.observers.set(observer);
    }

    /// The current set (cheap; hold it for the duration of a decision).
    pub fn current(&self) -> Arc<PluginSet> {
        self.current.load_full()
    }

    /// Why `plugin` can use none of the capabilities its manifest requests (no grant for it,
    /// perhaps under a misspelt name), with the fix; `None` when it is granted something or
    /// requests nothing.
    pub fn not_granted(&self, plugin: &crate::plugin::LoadedPlugin) -> Option<String> {
        let set = self.current();
        let loaded: Vec<&str> = set.iter().map(|p| p.name()).collect();
        self.cx
            .grants
            .not_granted_message(plugin.capabilities(), &loaded)
    }

    /// The grant problems of the loaded set, one warning each at start-up and after a
    /// reload: no grants at all while loaded plugins request capabilities, and grant entries
    /// that name no loaded plugin (a plugin simply left ungranted is the operator's choice:
    /// its NodeClasses say so when one uses it).
    pub fn grant_problems(&self) -> Vec<String> {
        let set = self.current();
        let loaded: Vec<&str> = set.iter().map(|p| p.name()).collect();
        let grants = &self.cx.grants;
        let mut problems = Vec::new();
        if grants.plugins.is_empty() {
            let asking: Vec<&str> = set
                .iter()
                .filter(|p| p.capabilities().nothing_granted().is_some())
                .map(|p| p.name())
                .collect();
            if !asking.is_empty() {
                problems.push(format!(
                    "no grants were given (--grants FILE or JOINERY_GRANTS; the chart's `grants` value): plugins {} request capabilities and get none, so NodeClasses that use them stay not Ready",
                    asking.join(", ")
                ));
            }
        }
        for (name, meant) in grants.unknown_plugins(&loaded) {
            problems.push(match meant {
                Some(meant) => format!(
                    "the grants file's entry plugins.{name} names no loaded plugin (did you mean {meant}?)"
                ),
                None => format!(
                    "the grants file's entry plugins.{name} names no loaded plugin (loaded: {})",
                    loaded.join(", ")
                ),
            });
        }
        problems
    }

    /// Why the last reload failed, if it did (the previous set is still serving).
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Why the last reload failed, when it failed on `plugin` (or named no plugin at all,
    /// like a missing directory), with what keeps serving in its place: for the status of
    /// the objects that use the plugin.
    pub fn reload_failure_for(&self, plugin: &str) -> Option<String> {
        let error = self.last_error()?;
        let named = self
            .last_failed_plugins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !named.is_empty() && !named.iter().any(|n| n == plugin) {
            return None;
        }
        let serving = match self.current().get(plugin) {
            Some(p) => format!(
                "version {} (sha256 {}) keeps serving",
                p.manifest().version,
                &p.digest()[..12]
            ),
            None => "no earlier version of it is loaded".to_string(),
        };
        Some(format!(
            "the last reload of plugin {plugin} failed ({serving}): {error}"
        ))
    }

    fn build_set(&self) -> Result<PluginSet, LoadError> {
        let mut errors = Vec::new();
        let mut plugins: BTreeMap<String, Arc<LoadedPlugin>> = BTreeMap::new();
        let mut origins: BTreeMap<String, String> = BTreeMap::new();
        {
            for (manifest, wasm) in self.builtins.iter().cloned() {
                let name = manifest.name.clone();
                match self.load_one(manifest, PluginSource::Builtin, wasm) {
                    Ok(p) => {
                        plugins.insert(name.clone(), Arc::new(p));
                        origins.insert(name, "built-in".into());
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        let mut from_dirs: BTreeMap<String, String> = BTreeMap::new();
        for dir in discover(&self.roots) {
            let loaded = read_plugin_dir(&dir).and_then(|pd| {
                let name = pd.manifest.name.clone();
                if let Some(first) = from_dirs.get(&name) {
                    return Err(LoadError::Duplicate {
                        plugin: name,
                        first: first.clone(),
                        second: dir.display().to_string(),
                    });
                }
                from_dirs.insert(name, dir.display().to_string());
                self.load_one(pd.manifest, PluginSource::Directory(dir.clone()), &pd.wasm)
            });
            match loaded {
                Ok(p) => {
                    if origins.get(p.name()).is_some_and(|o| o == "built-in") {
                        tracing::info!(plugin = p.name(), dir = %dir.display(), "directory plugin replaces the built-in one");
                    }
                    origins.insert(p.name().to_string(), dir.display().to_string());
                    plugins.insert(p.name().to_string(), Arc::new(p));
                }
                Err(e) => errors.push(e),
            }
        }
        // One NodeClass kind, one cloud plugin: otherwise which one launches is a coin toss.
        let mut serving: BTreeMap<(String, String), String> = BTreeMap::new();
        for plugin in plugins.values() {
            let Some(class) = &plugin.manifest().node_class else {
                continue;
            };
            let key = (class.group.clone(), class.kind.clone());
            if let Some(first) = serving.get(&key) {
                errors.push(LoadError::NodeClassConflict {
                    group: class.group.clone(),
                    kind: class.kind.clone(),
                    first: format!(
                        "{first} ({})",
                        origins.get(first).map_or("?", String::as_str)
                    ),
                    second: format!(
                        "{} ({})",
                        plugin.name(),
                        origins.get(plugin.name()).map_or("?", String::as_str)
                    ),
                });
            } else {
                serving.insert(key, plugin.name().to_string());
            }
        }
        if !errors.is_empty() {
            return Err(if errors.len() == 1 {
                errors.remove(0)
            } else {
                LoadError::Set(errors)
            });
        }
        Ok(PluginSet { plugins })
    }

    fn load_one(
        &self,
        manifest: PluginManifest,
        source: PluginSource,
        wasm: &[u8],
    ) -> Result<LoadedPlugin, LoadError> {
        let digest = sha256_hex(wasm);
        if source == PluginSource::Builtin {
            self.builtin_digests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(digest.clone());
        }
        let cached = self
            .compiled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&digest)
            .cloned();
        let plugin = LoadedPlugin::load(
            &self.cx,
            PluginBytes {
                manifest,
                source,
                wasm,
                compiled: cached,
            },
        )?;
        // Compile once per digest: keep the compiled component for later reloads.
        self.compiled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(digest, plugin.component().clone());
        Ok(plugin)
    }

    /// Reloads if the directories changed, or if the last reload failed (a failure may be
    /// transient: a ConfigMap caught mid-update, a file not yet readable). Returns `Ok(true)`
    /// when a new set was swapped in, `Ok(false)` when nothing changed, and the error
    /// (keeping the old set) otherwise.
    pub fn reload_if_changed(&self) -> Result<bool, LoadError> {
        let fingerprint = fingerprint(&self.roots);
        let failed_before = self.last_error().is_some();
        if !failed_before
            && *self
                .last_fingerprint
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                == fingerprint
        {
            return Ok(false);
        }
        let result = check_roots(&self.roots).and_then(|()| self.build_set());
        match result {
            Ok(set) => {
                *self
                    .last_fingerprint
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = fingerprint;
                let names: Vec<String> = set
                    .iter()
                    .map(|p| {
                        format!(
                            "{} {}@{}",
                            p.name(),
                            p.manifest().version,
                            &p.digest()[..12]
                        )
                    })
                    .collect();
                let before = self.current();
                for plugin in set.iter() {
                    let changed = before
                        .get(plugin.name())
                        .is_none_or(|old| old.digest() != plugin.digest());
                    if changed {
                        self.cx
                            .services
                            .observers
                            .notify_reload(plugin.name(), "success");
                    }
                }
                self.current.store(Arc::new(set));
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
                self.last_failed_plugins
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clear();
                tracing::info!(plugins = ?names, "plugin set reloaded");
                for problem in self.grant_problems() {
                    tracing::warn!("{problem}");
                }
                self.prune_unused();
                Ok(true)
            }
            Err(e) => {
                // The fingerprint is not recorded: the next poll tries again. The error is
                // logged when it first appears or changes, not on every retry.
                let message = e.to_string();
                let mut last = self.last_error.lock().unwrap_or_else(|p| p.into_inner());
                if last.as_deref() != Some(message.as_str()) {
                    tracing::error!(error = %message, "plugin reload failed; keeping the last good set and retrying");
                    let plugins = e.plugins();
                    if plugins.is_empty() {
                        self.cx.services.observers.notify_reload("", "failure");
                    }
                    for plugin in plugins {
                        self.cx.services.observers.notify_reload(plugin, "failure");
                    }
                }
                *last = Some(message);
                *self
                    .last_failed_plugins
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) =
                    e.plugins().into_iter().map(str::to_string).collect();
                Err(e)
            }
        }
    }

    /// After a reload: forgets the compiled components of the digests the current set no
    /// longer uses (built-ins aside), and removes their compile-cache entries as far as
    /// [`crate::engine::PluginEngine::prune_cached`] deems safe. Without it both the
    /// in-memory map and the cache directory grew with every update of a plugin.
    fn prune_unused(&self) {
        let current = self.current();
        let in_use: HashSet<&str> = current.iter().map(|p| p.digest()).collect();
        let retired: Vec<String> = {
            let builtins = self
                .builtin_digests
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let mut compiled = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
            let retired: Vec<String> = compiled
                .keys()
                .filter(|d| !in_use.contains(d.as_str()) && !builtins.contains(d.as_str()))
                .cloned()
                .collect();
            for digest in &retired {
                compiled.remove(digest);
            }
            retired
        };
        for digest in retired {
            if self.cx.engine.prune_cached(&digest) {
                tracing::debug!(digest = %digest, "compile-cache entry of a plugin no longer loaded removed");
            }
        }
    }

    /// Polls the directories every `interval` and reloads on change, until the registry is dropped.
    pub fn watch(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                ticker.tick().await;
                let Some(registry) = weak.upgrade() else {
                    break;
                };
                let _ = tokio::task::spawn_blocking(move || registry.reload_if_changed()).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pricing_plugin_is_the_grants_then_the_manifests_then_the_default() {
        let text = "name: c\nversion: 0.1.0\nkind: cloud-provider\nwit: 0.1.0\nnodeClass: {group: g, version: v1, kind: K}\n";
        let plain = PluginManifest::parse(text, "t").unwrap();
        let named =
            PluginManifest::parse(&format!("{text}pricing: clevercloud-pricing\n"), "t").unwrap();
        let none = PluginGrant::default();
        let chosen = PluginGrant {
            pricing: Some("my-prices".into()),
            ..PluginGrant::default()
        };
        assert_eq!(pricing_plugin_name(&plain, &none), "synthetic-pricing");
        assert_eq!(pricing_plugin_name(&named, &none), "clevercloud-pricing");
        assert_eq!(pricing_plugin_name(&named, &chosen), "my-prices");
        assert_eq!(pricing_plugin_name(&plain, &chosen), "my-prices");
    }
}

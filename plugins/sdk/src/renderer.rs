//! userData renderers (world `userdata-renderer-plugin`, feature `renderer`).
//!
//! Implement [`Renderer`] and export it with [`export_renderer!`](crate::export_renderer).
//! A renderer is pure: text in, text out. It imports only `log` and `config`; the secrets
//! it was granted arrive in the [`RenderContext`].

use std::marker::PhantomData;

pub use crate::bindings::renderer::exports::joinery::plugin::renderer::{
    NodeRegistration, RenderContext, RenderError,
};
pub use crate::bindings::renderer::joinery::plugin::types::{
    Condition, KeyValue, Operator, Requirement, Resource, Taint,
};
pub use crate::common::{REGISTRATION_TAINT_EFFECT, REGISTRATION_TAINT_KEY};

crate::common::common_type_impls!();

/// A userData renderer.
pub trait Renderer {
    /// Renders the userData for one NodeClaim.
    fn render(context: RenderContext) -> Result<String, RenderError>;

    /// What a node booted from `render(context)`'s output registers with (node name,
    /// labels, taints, provider ID), for a userData format the simulator does not know:
    /// it then boots the node by this promise, and `joinery render --boot` prints it.
    /// The default, `None`, makes no promise (fine for k3s, RKE2, kubeadm or a script that
    /// runs the kubelet, which the simulator reads itself). Test it against `render`.
    fn registration(context: RenderContext) -> Result<Option<NodeRegistration>, RenderError> {
        let _ = context;
        Ok(None)
    }
}

impl RenderContext {
    /// The renderer parameter `key` from the NodeClass (`userDataRenderer.parameters`).
    pub fn parameter(&self, key: &str) -> Option<&str> {
        lookup(&self.parameters, key)
    }

    /// The parameter `key`, treating an empty or blank value as unset.
    pub fn non_empty_parameter(&self, key: &str) -> Option<&str> {
        self.parameter(key).map(str::trim).filter(|v| !v.is_empty())
    }

    /// A granted secret value, addressed as `secret-name/key`.
    pub fn secret(&self, name_and_key: &str) -> Option<&str> {
        lookup(&self.secrets, name_and_key)
    }

    /// The node's labels sorted by key (last value wins for a repeated key).
    pub fn sorted_labels(&self) -> Vec<(&str, &str)> {
        sorted_labels(&self.labels)
    }

    /// The taints the node registers with: the taints, then the startup taints, then
    /// `karpenter.sh/unregistered:NoExecute` if the host did not include it; duplicates
    /// (same key and effect) dropped.
    pub fn node_taints(&self) -> Vec<Taint> {
        node_taints(&self.taints, &self.startup_taints)
    }

    /// The NodeClass kubelet settings as a JSON object (`{}` when unset).
    pub fn kubelet_settings(
        &self,
    ) -> Result<serde_json::Map<String, serde_json::Value>, RenderError> {
        if self.kubelet.trim().is_empty() {
            return Ok(serde_json::Map::new());
        }
        match serde_json::from_str::<serde_json::Value>(&self.kubelet) {
            Ok(serde_json::Value::Object(map)) => Ok(map),
            Ok(serde_json::Value::Null) => Ok(serde_json::Map::new()),
            Ok(_) => Err(RenderError::InvalidParameter(
                "kubelet settings must be a JSON object".to_string(),
            )),
            Err(e) => Err(RenderError::InvalidParameter(format!(
                "kubelet settings are not valid JSON: {e}"
            ))),
        }
    }

    /// An empty context for `node_claim` (handy in tests): no labels, no taints, kubelet `{}`.
    pub fn for_claim(node_claim: impl Into<String>) -> Self {
        RenderContext {
            node_claim: node_claim.into(),
            node_pool: String::new(),
            labels: Vec::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            kubelet: "{}".to_string(),
            instance_type: None,
            zone: None,
            capacity_type: None,
            cluster_name: String::new(),
            cluster_endpoint: String::new(),
            provider_id_prefix: String::new(),
            user_data: None,
            parameters: Vec::new(),
            secrets: Vec::new(),
            resource_requests: Vec::new(),
        }
    }
}

impl RenderError {
    /// The message, without the variant.
    pub fn message(&self) -> &str {
        match self {
            RenderError::InvalidParameter(m)
            | RenderError::MissingSecret(m)
            | RenderError::InvalidTemplate(m) => m,
        }
    }
}

/// Adapts a [`Renderer`] to the generated export trait; used by [`export_renderer!`](crate::export_renderer).
#[doc(hidden)]
pub struct RendererExport<T>(PhantomData<T>);

impl<T: Renderer> crate::bindings::renderer::exports::joinery::plugin::renderer::Guest
    for RendererExport<T>
{
    fn render(context: RenderContext) -> Result<String, RenderError> {
        T::render(context)
    }
    fn registration(context: RenderContext) -> Result<Option<NodeRegistration>, RenderError> {
        T::registration(context)
    }
}

/// Exports a type implementing [`renderer::Renderer`](crate::renderer::Renderer) as the
/// component's `joinery:plugin/renderer` interface. Invoke it once, at the crate root of
/// a `cdylib` plugin.
///
/// ```ignore
/// struct MyRenderer;
/// impl joinery_plugin_sdk::renderer::Renderer for MyRenderer { /* … */ }
/// joinery_plugin_sdk::export_renderer!(MyRenderer);
/// ```
#[macro_export]
macro_rules! export_renderer {
    ($ty:ty) => {
        const _: () = {
            // Checked on every target, so `cargo test` catches a type that does not implement the trait.
            #[allow(dead_code)]
            fn __joinery_check_impl() {
                let _ = <$ty as $crate::renderer::Renderer>::render;
            }
            // The component exports exist only on wasm32: their names are not valid native symbols.
            #[cfg(target_arch = "wasm32")]
            type __JoineryRendererExport = $crate::renderer::RendererExport<$ty>;
            #[cfg(target_arch = "wasm32")]
            $crate::bindings::renderer::__joinery_export_renderer_world!(
                __JoineryRendererExport with_types_in $crate::bindings::renderer
            );
        };
    };
}

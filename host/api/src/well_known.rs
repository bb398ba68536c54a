//! Well-known label keys, annotations, taints and the finalizer used by Karpenter core.

/// API group of all Karpenter core kinds.
pub const GROUP: &str = "karpenter.sh";

/// Label keys.
pub mod labels {
    /// Name of the NodePool that owns a NodeClaim/Node.
    pub const NODE_POOL: &str = "karpenter.sh/nodepool";
    /// Capacity type of a node: [`CAPACITY_TYPE_ON_DEMAND`], [`CAPACITY_TYPE_SPOT`] or
    /// [`CAPACITY_TYPE_RESERVED`].
    pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
    /// `"true"` once the Node registered (set together with removing the unregistered taint).
    pub const REGISTERED: &str = "karpenter.sh/registered";
    /// `"true"` once the Node is initialized.
    pub const INITIALIZED: &str = "karpenter.sh/initialized";
    /// `"true"` on a Node: registration does not copy NodeClaim taints onto it.
    pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";
    /// Added (value `karpenter`) when a node starts terminating.
    pub const EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: &str =
        "node.kubernetes.io/exclude-from-external-load-balancers";

    /// Value of [`CAPACITY_TYPE`] for on-demand capacity.
    pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
    /// Value of [`CAPACITY_TYPE`] for spot capacity.
    pub const CAPACITY_TYPE_SPOT: &str = "spot";
    /// Value of [`CAPACITY_TYPE`] for reserved capacity.
    pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

    /// Zone topology label.
    pub const ZONE: &str = "topology.kubernetes.io/zone";
    /// Region topology label.
    pub const REGION: &str = "topology.kubernetes.io/region";
    /// Instance type label.
    pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
    /// CPU architecture label (`amd64`, `arm64`).
    pub const ARCH: &str = "kubernetes.io/arch";
    /// Operating system label.
    pub const OS: &str = "kubernetes.io/os";
    /// Windows build label.
    pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
    /// Hostname label; never settable through Karpenter.
    pub const HOSTNAME: &str = "kubernetes.io/hostname";

    /// Labels that pods and pools may constrain without them being "undefined" (providers add
    /// their own).
    pub const WELL_KNOWN: &[&str] = &[
        NODE_POOL,
        ZONE,
        REGION,
        INSTANCE_TYPE,
        ARCH,
        OS,
        CAPACITY_TYPE,
        WINDOWS_BUILD,
    ];

    /// Deprecated label keys and the keys they are normalized to.
    pub const NORMALIZED: &[(&str, &str)] = &[
        ("failure-domain.beta.kubernetes.io/zone", ZONE),
        ("failure-domain.beta.kubernetes.io/region", REGION),
        ("beta.kubernetes.io/arch", ARCH),
        ("beta.kubernetes.io/os", OS),
        ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
    ];
}

/// Annotation keys.
pub mod annotations {
    /// On a Pod (`"true"` or a duration) or Node (`"true"`): block voluntary disruption.
    pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
    /// Hash of a NodePool's template (on NodePools and NodeClaims).
    pub const NODE_POOL_HASH: &str = "karpenter.sh/nodepool-hash";
    /// Version of the NodePool hash algorithm.
    pub const NODE_POOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
    /// Current value of [`NODE_POOL_HASH_VERSION`].
    pub const NODE_POOL_HASH_VERSION_VALUE: &str = "v3";
    /// RFC 3339 deadline after which a terminating node's pods are force-deleted.
    pub const NODE_CLAIM_TERMINATION_TIMESTAMP: &str =
        "karpenter.sh/nodeclaim-termination-timestamp";
    /// `"true"`/`"false"`: `minValues` was relaxed when launching the NodeClaim.
    pub const NODE_CLAIM_MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
    /// Comma-separated DRA drivers whose pools initialization waits for.
    pub const REQUESTED_DRA_DRIVERS: &str = "karpenter.sh/requested-dra-drivers";
    /// `"true"` on NodeClaims launched from a price-overlaid instance type.
    pub const PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";
    /// `"true"` on NodeClaims launched from a capacity-overlaid instance type.
    pub const CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";
    /// `"true"` on the virtual pods injected for capacity buffers.
    pub const CAPACITY_BUFFER_FAKE_POD: &str = "karpenter.sh/capacity-buffer-fake-pod";
    /// Name of the capacity buffer a virtual pod stands for.
    pub const CAPACITY_BUFFER_NAME: &str = "karpenter.sh/capacity-buffer-name";
    /// Namespace of the capacity buffer a virtual pod stands for.
    pub const CAPACITY_BUFFER_NAMESPACE: &str = "karpenter.sh/capacity-buffer-namespace";
    /// Legacy conversion key naming the provider.
    pub const COMPATIBILITY_PROVIDER: &str = "compatibility.karpenter.sh/provider";
    /// Kubernetes pod deletion cost, honored when ranking disruption candidates.
    pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
}

/// Taint keys.
pub mod taints {
    /// `karpenter.sh/unregistered:NoExecute` — put on Nodes at boot, removed at registration.
    pub const UNREGISTERED: &str = "karpenter.sh/unregistered";
    /// `karpenter.sh/disrupted:NoSchedule` — put on nodes being disrupted.
    pub const DISRUPTED: &str = "karpenter.sh/disrupted";
    /// Taint key prefix whose taints are ignored while a node is uninitialized.
    pub const READINESS_PREFIX: &str = "readiness.k8s.io/";
}

/// Finalizer on NodeClaims and Nodes managed by Karpenter.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// The pseudo-resource counting nodes in NodePool `limits` and `status.resources`.
pub const RESOURCE_NODES: &str = "nodes";

//! The metric names (upstream's, namespace `karpenter`; Joinery's own start `joinery_`).

/// NodeClaims created, by `reason` and `nodepool`.
pub const NODECLAIMS_CREATED: &str = "karpenter_nodeclaims_created_total";
/// NodeClaims whose finalizer completed, by `nodepool`, `capacity_type`, `zone`.
pub const NODECLAIMS_TERMINATED: &str = "karpenter_nodeclaims_terminated_total";
/// NodeClaims disrupted, by `reason`, `nodepool`, `capacity_type`.
pub const NODECLAIMS_DISRUPTED: &str = "karpenter_nodeclaims_disrupted_total";
/// NodeClaims node repair deleted, by `condition` (snake case), `nodepool`,
/// `capacity_type`, `image_id`.
pub const NODECLAIMS_UNHEALTHY_DISRUPTED: &str = "karpenter_nodeclaims_unhealthy_disrupted_total";
/// Nodes registered, by `nodepool`, `zone`.
pub const NODES_CREATED: &str = "karpenter_nodes_created_total";
/// Nodes whose finalizer completed, by `nodepool`, `zone`.
pub const NODES_TERMINATED: &str = "karpenter_nodes_terminated_total";
/// Nodes whose drain completed, by `nodepool`.
pub const NODES_DRAINED: &str = "karpenter_nodes_drained_total";
/// Eviction requests, by `code`.
pub const EVICTION_REQUESTS: &str = "karpenter_pods_eviction_requests_total";
/// Reschedulable pods on NodeClaims whose disruption started, by `reason`, `nodepool`,
/// `capacity_type`.
pub const PODS_DISRUPTION_INITIATED: &str = "karpenter_pods_disruption_initiated_total";
/// Failed cloud-provider calls, by `controller`, `method`, `provider` and `error`.
pub const CLOUDPROVIDER_ERRORS: &str = "karpenter_cloudprovider_errors_total";
/// Instances no NodeClaim owned that garbage collection deleted, by `provider` (Joinery's own).
pub const INSTANCES_GARBAGE_COLLECTED: &str = "joinery_instances_garbage_collected_total";
/// Disruption decisions started, by `decision` (`delete`/`replace`), `reason` and
/// `consolidation_type`.
pub const VOLUNTARY_DISRUPTION_DECISIONS: &str = "karpenter_voluntary_disruption_decisions_total";
/// Commands abandoned at validation, by `consolidation_type`.
pub const VOLUNTARY_DISRUPTION_FAILED_VALIDATIONS: &str =
    "karpenter_voluntary_disruption_failed_validations_total";
/// Started commands rolled back (a replacement vanished or never initialized), by
/// `decision` and `reason`.
pub const VOLUNTARY_DISRUPTION_QUEUE_FAILURES: &str =
    "karpenter_voluntary_disruption_queue_failures_total";
/// Gauge: nodes a method may consider, by `reason`.
pub const VOLUNTARY_DISRUPTION_ELIGIBLE_NODES: &str =
    "karpenter_voluntary_disruption_eligible_nodes";
/// Gauge: nodes of a pool that may still be disrupted now, by `nodepool` and `reason`.
pub const NODEPOOLS_ALLOWED_DISRUPTIONS: &str = "karpenter_nodepools_allowed_disruptions";
/// Gauge (always 1): `version`, `goversion` (the Rust toolchain here), `goarch`, `commit`.
pub const BUILD_INFO: &str = "karpenter_build_info";
/// Gauge: Nodes in the cluster state.
pub const CLUSTER_STATE_NODE_COUNT: &str = "karpenter_cluster_state_node_count";
/// Gauge: 1 when every cache has synced.
pub const CLUSTER_STATE_SYNCED: &str = "karpenter_cluster_state_synced";
/// Gauge: a NodePool's resources in use, by `nodepool` and `resource_type`.
pub const NODEPOOLS_USAGE: &str = "karpenter_nodepools_usage";
/// Gauge: a NodePool's limits, by `nodepool` and `resource_type`.
pub const NODEPOOLS_LIMIT: &str = "karpenter_nodepools_limit";
/// Gauge (1 per pod): `name`, `namespace`, `owner`, `node`, `nodepool`, `zone`, `arch`,
/// `capacity_type`, `instance_type`, `phase`, `scheduled`, `ready`, `managed`.
pub const PODS_STATE: &str = "karpenter_pods_state";
/// Histogram (upstream: summary): seconds from a pod's creation to its first Ready.
pub const PODS_STARTUP_DURATION: &str = "karpenter_pods_startup_duration_seconds";
/// Histogram: duration of a scheduling simulation, by `controller`.
pub const SCHEDULER_SCHEDULING_DURATION: &str = "karpenter_scheduler_scheduling_duration_seconds";
/// Gauge: pods in the scheduling pass under way, by `controller` and `scheduling_id`.
pub const SCHEDULER_QUEUE_DEPTH: &str = "karpenter_scheduler_queue_depth";
/// Histogram: from a NodeClaim's deletion to its finalizer's removal, by `nodepool`.
pub const NODECLAIMS_TERMINATION_DURATION: &str =
    "karpenter_nodeclaims_termination_duration_seconds";
/// Histogram (upstream: summary): from a Node's deletion to its finalizer's removal, by
/// `nodepool`.
pub const NODES_TERMINATION_DURATION: &str = "karpenter_nodes_termination_duration_seconds";
/// Histogram: duration of cloud-provider calls, by `controller`, `method`, `provider`.
pub const CLOUDPROVIDER_DURATION: &str = "karpenter_cloudprovider_duration_seconds";
/// Histogram: duration of one disruption method's evaluation, by `reason` and
/// `consolidation_type`.
pub const VOLUNTARY_DISRUPTION_DECISION_EVALUATION_DURATION: &str =
    "karpenter_voluntary_disruption_decision_evaluation_duration_seconds";
/// Histogram: from a NodeClaim's instance deletion being requested (its
/// `InstanceTerminating` condition) to the cloud answering that the instance is gone, by
/// `nodepool`.
pub const NODECLAIMS_INSTANCE_TERMINATION_DURATION: &str =
    "karpenter_nodeclaims_instance_termination_duration_seconds";
/// Gauge: a node's allocatable resources, by upstream's node labels and `resource_type`.
pub const NODES_ALLOCATABLE: &str = "karpenter_nodes_allocatable";
/// Gauge: what a node's pods request (DaemonSet pods included), by upstream's node labels
/// and `resource_type`.
pub const NODES_TOTAL_POD_REQUESTS: &str = "karpenter_nodes_total_pod_requests";
/// Gauge: what a node's DaemonSet pods request, by upstream's node labels and
/// `resource_type`.
pub const NODES_TOTAL_DAEMON_REQUESTS: &str = "karpenter_nodes_total_daemon_requests";
/// Gauge (1 per condition): `namespace`, `name`, `type`, `status`, `reason`, `group`,
/// `kind` of each condition of each NodeClaim and NodePool (the operator package's).
pub const STATUS_CONDITION_COUNT: &str = "operator_status_condition_count";
/// Gauge: seconds a condition has held its status, labelled as
/// [`STATUS_CONDITION_COUNT`].
pub const STATUS_CONDITION_CURRENT_STATUS_SECONDS: &str =
    "operator_status_condition_current_status_seconds";
/// Condition transitions seen, by `type`, `status` (the new one), `reason`, `group`,
/// `kind`.
pub const STATUS_CONDITION_TRANSITIONS: &str = "operator_status_condition_transitions_total";
/// Histogram: how long a condition held its status before it changed, by `type`,
/// `status` (the old one), `group`, `kind` (Prometheus's default buckets, as upstream).
pub const STATUS_CONDITION_TRANSITION_SECONDS: &str =
    "operator_status_condition_transition_seconds";
/// Plugin calls, by `plugin` and `method` (every world: cloud, renderer, pricing).
pub const PLUGIN_CALLS: &str = "joinery_plugin_calls_total";
/// Failed plugin calls, by `plugin`, `method` and `class` (`trap`, `timeout`,
/// `memory`, `saturated`, the cloud error classes, …).
pub const PLUGIN_ERRORS: &str = "joinery_plugin_errors_total";
/// Hot reloads of plugins, by plugin and result (`success`, `failure`).
pub const PLUGIN_RELOADS: &str = "joinery_plugin_reloads_total";
/// Histogram: duration of plugin calls, by `plugin` and `method`.
pub const PLUGIN_CALL_DURATION: &str = "joinery_plugin_call_duration_seconds";
/// Gauge: peak linear memory of the plugin's latest call, by `plugin` and `method`.
pub const PLUGIN_MEMORY: &str = "joinery_plugin_memory_bytes";
/// Gauge: the memory limit (`limits.memoryMiB`) of the plugin's latest call, by `plugin`
/// and `method` (the labels of [`PLUGIN_MEMORY`], to divide one by the other).
pub const PLUGIN_MEMORY_LIMIT: &str = "joinery_plugin_memory_limit_bytes";
/// Failed steps of a controller loop (or of one object's reconcile), by `controller` and
/// `error` (the error's kind), as kube-rs's controller-rs counts them.
pub const CONTROLLER_RECONCILE_ERRORS: &str = "joinery_controller_reconcile_errors_total";

//! A fake of Clever Cloud Kubernetes Engine (CKE) around the emulated cluster, for the
//! `clevercloud` cloud plugin and the `clevercloud-pricing` pricing plugin.
//!
//! - [`nodegroups`]: the `nodegroups.api.clever-cloud.com` CRD as CKE serves it, and the
//!   operator that turns each NodeGroup into a machine whose Node registers itself (named
//!   `<nodegroup>-node0`, with an empty `spec.providerID`), under an organisation quota.
//! - [`pricing`]: Clever Cloud's two public pricing endpoints, with failure modes.

pub mod nodegroups;
pub mod pricing;

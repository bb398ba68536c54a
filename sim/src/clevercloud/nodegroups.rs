//! The NodeGroup CRD of CKE and its operator (being written).

//! Clever Cloud's public pricing endpoints (being written).

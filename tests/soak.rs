//! The soak test, in a test binary of its own so that its resident-memory check measures only
//! its own workload (tests in one binary share one process).

// The shared helpers, of which the soak test uses a few.
#[allow(dead_code)]
#[path = "it/common/mod.rs"]
mod common;
#[path = "it/soak.rs"]
mod soak;

//! Robustness fuzzing with proptest (bounded, in process; cargo-fuzz is not used in CI):
//! arbitrary requests sent to every route of the REST server (from its OpenAPI document) must
//! answer a 2xx or a 4xx in the contract's JSON error shape and create nothing on disk unless a
//! write succeeded, and corrupted cold segments must read back as truncation, never as
//! different data.
//!
//! Proptest persistence files are off (`failure_persistence: None`); a failing case found by
//! a run is kept in [`regressions`] as an explicit test. Runs are reproducible: the seed is
//! fixed unless `DURABILITY_FUZZ_SEED` names another, and `DURABILITY_FUZZ_CASES` sets the
//! number of cases of each fuzz test for a longer exploration.
//!
//! - [`requests`]: arbitrary and well-formed requests to every route of the server;
//! - [`segments`]: corrupted cold segments;
//! - [`kafka_frames`]: damaged Kafka requests and record batches;
//! - [`regressions`]: the failing cases those runs found, kept as explicit tests.
//!
//! The seed, the number of cases and the runner below are shared by the fuzz tests.

use proptest::test_runner::{Config as ProptestConfig, RngAlgorithm, TestRng, TestRunner};

/// The seed of the fuzz runs when `DURABILITY_FUZZ_SEED` does not name one: a fixed seed keeps
/// a CI run reproducible; set the variable to explore further.
const DEFAULT_SEED: u64 = 20_240_601;

/// The fuzz runs' seed: `DURABILITY_FUZZ_SEED` (an integer) or [`DEFAULT_SEED`].
fn fuzz_seed() -> u64 {
    std::env::var("DURABILITY_FUZZ_SEED")
        .ok()
        .and_then(|seed| seed.trim().parse().ok())
        .unwrap_or(DEFAULT_SEED)
}

/// `default` cases, or `DURABILITY_FUZZ_CASES` (an integer) for a longer exploration.
fn fuzz_cases(default: u32) -> u32 {
    std::env::var("DURABILITY_FUZZ_CASES")
        .ok()
        .and_then(|cases| cases.trim().parse().ok())
        .unwrap_or(default)
}

/// A proptest runner for `cases` cases from [`fuzz_seed`], with no persistence files.
fn runner(cases: u32) -> TestRunner {
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        max_global_rejects: cases * 4,
        ..ProptestConfig::default()
    };
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&fuzz_seed().to_le_bytes());
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
}

mod kafka_frames;
mod regressions;
mod requests;
mod segments;

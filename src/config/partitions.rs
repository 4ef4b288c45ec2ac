//! `[partitions]`: partition actor lifecycle (when an idle one stops, how many stay open).

use serde::Deserialize;

use super::{ConfigError, positive};

/// Open partitions allowed per MiB of the machine's memory when `partitions.max_open` is 0.
const OPEN_PARTITIONS_PER_MIB: usize = 1;
/// Bounds of the derived `partitions.max_open`.
const DERIVED_MAX_OPEN: std::ops::RangeInclusive<usize> = 1_000..=100_000;

/// `[partitions]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionSettings {
    /// Stop a partition's actor after this long without messages. Default: 5 min.
    pub idle_stop_ms: u64,
    /// Most partitions open at once; opening one more first closes the least recently used
    /// one with nothing in flight. 0: derived from the machine's memory at start. Default: 0.
    pub max_open: usize,
}

impl PartitionSettings {
    /// The limit in force: `max_open`, or when it is 0, one partition per MiB of the machine's
    /// memory (an open partition costs a few KiB; the rest is headroom for its caches and
    /// callers), between 1,000 and 100,000. File descriptors do not bound it: partitions hold
    /// none of their own (they share the volumes' connections).
    pub fn max_open(&self) -> usize {
        if self.max_open > 0 {
            return self.max_open;
        }
        let memory_mib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("MemTotal:"))
                    .and_then(|rest| {
                        rest.trim()
                            .trim_end_matches("kB")
                            .trim()
                            .parse::<usize>()
                            .ok()
                    })
            })
            .map_or(4096, |kib| kib / 1024);
        (memory_mib * OPEN_PARTITIONS_PER_MIB)
            .clamp(*DERIVED_MAX_OPEN.start(), *DERIVED_MAX_OPEN.end())
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("partitions.idle_stop_ms", self.idle_stop_ms)
    }
}

//! Routing: which partition an event belongs to, what its shard is called, and a client-side
//! [`Router`] that groups a producer's events per partition and remembers partitions' load.
//!
//! The partitioning function is the original library's (Part A 20): producers written against
//! the original and against this crate must send the same key to the same partition, so its
//! quirks (UTF-16 code units, signed absolute value, the empty key) are reproduced exactly.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::clock::Clock;
use crate::load::LoadSnapshot;

/// 32-bit FNV-1a offset basis (0x811C9DC5).
const FNV_OFFSET_BASIS: u32 = 2_166_136_261;

/// 32-bit FNV-1a prime (0x01000193).
const FNV_PRIME: u32 = 16_777_619;

/// How many partitions' observations a [`Router`] keeps, so a producer talking to very many
/// partitions holds bounded memory (the original's cap).
const MAX_OBSERVATIONS: usize = 1_024;

/// 32-bit FNV-1a over the key's UTF-16 code units (not its UTF-8 bytes), because that is what
/// the original computes on JavaScript strings: "é" is one unit (0x00E9), "😀" is two
/// (a surrogate pair).
pub fn fnv1a_utf16(key: &str) -> u32 {
    key.encode_utf16().fold(FNV_OFFSET_BASIS, |hash, unit| {
        (hash ^ u32::from(unit)).wrapping_mul(FNV_PRIME)
    })
}

/// The partition (`0..partitions`) that events with `key` go to, identical to the original's
/// so mixed producers agree: [`fnv1a_utf16`] read as a signed 32-bit integer, its absolute
/// value, modulo `partitions`.
///
/// The empty key is the exception: the original never mixes anything into the basis, which it
/// then holds as the unsigned number 2166136261, so `""` lands on 2166136261 mod `partitions`
/// (5 for 8 partitions, where the signed rule would give 3).
///
/// # Panics
/// If `partitions` is 0 (a topic always has at least one partition).
pub fn partition_for(key: &str, partitions: u32) -> u32 {
    debug_assert!(partitions >= 1, "a topic has at least one partition");
    let hash = fnv1a_utf16(key);
    let magnitude = if key.is_empty() {
        hash
    } else {
        // `unsigned_abs` keeps i32::MIN's magnitude (2^31) instead of overflowing.
        hash.cast_signed().unsigned_abs()
    };
    magnitude % partitions
}

/// The shard (partition actor and database) name of `partition` of `topic`:
/// `{topic}:{partition}`, the one spelling every layer uses.
pub fn shard_name(topic: &str, partition: u32) -> String {
    format!("{topic}:{partition}")
}

/// A producer's view of one topic's partitions: splits events into one batch per partition
/// (an append goes to exactly one partition) and remembers the load each partition last
/// reported, so the caller can weigh partitions by backlog.
///
/// Shareable across threads; methods take a short in-memory lock and never block otherwise.
#[derive(Debug)]
pub struct Router {
    partitions: u32,
    clock: Arc<dyn Clock>,
    observations: Mutex<BTreeMap<u32, LoadSnapshot>>,
}

impl Router {
    /// A router for a topic with `partitions` partitions (at least 1), ageing observations by
    /// `clock` so tests can move time.
    pub fn new(partitions: u32, clock: Arc<dyn Clock>) -> Self {
        debug_assert!(partitions >= 1, "a topic has at least one partition");
        Self {
            partitions,
            clock,
            observations: Mutex::default(),
        }
    }

    /// The topic's partition count, which [`group`](Self::group) routes over.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Splits `events` into one batch per partition ([`partition_for`] on `key(event)`), each
    /// batch in input order and each event paired with its index in `events`, so the caller can
    /// map per-batch results (offsets, rejections) back to its input.
    pub fn group<E>(
        &self,
        events: Vec<E>,
        key: impl Fn(&E) -> &str,
    ) -> BTreeMap<u32, Vec<(usize, E)>> {
        let mut batches: BTreeMap<u32, Vec<(usize, E)>> = BTreeMap::new();
        for (index, event) in events.into_iter().enumerate() {
            let partition = partition_for(key(&event), self.partitions);
            batches.entry(partition).or_default().push((index, event));
        }
        batches
    }

    /// Remembers `snapshot` as `partition`'s latest load. A snapshot older (by `observed_at`)
    /// than the one stored is ignored, so a slow response cannot overwrite fresher news. At
    /// most 1,024 partitions are remembered; beyond that the oldest observation is dropped.
    pub fn observe(&self, partition: u32, snapshot: LoadSnapshot) {
        let mut observations = self.lock();
        if observations
            .get(&partition)
            .is_some_and(|stored| snapshot.observed_at < stored.observed_at)
        {
            return;
        }
        observations.insert(partition, snapshot);
        if observations.len() > MAX_OBSERVATIONS {
            let oldest = observations
                .iter()
                .min_by_key(|(_, stored)| stored.observed_at)
                .map(|(&oldest, _)| oldest);
            if let Some(oldest) = oldest {
                observations.remove(&oldest);
            }
        }
    }

    /// A copy of `partition`'s latest load, or `None` when none was observed or it is
    /// `window_ms` or more old by the router's clock (its numbers no longer describe the
    /// partition). A copy, so the caller may adjust it without changing what is stored.
    pub fn observation(&self, partition: u32) -> Option<LoadSnapshot> {
        let now = i128::from(self.clock.now_ms());
        self.lock()
            .get(&partition)
            .filter(|snapshot| {
                now - i128::from(snapshot.observed_at) < i128::from(snapshot.window_ms)
            })
            .cloned()
    }

    /// Observations are plain copies, consistent after every single insert or remove, so a
    /// poisoned lock is used as is rather than failing the producer.
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u32, LoadSnapshot>> {
        self.observations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::load::{OutboundPressure, Pressure, WINDOW_MS};

    /// Part B 5.3: (key, hash, partition for N = 8, partition for N = 16).
    const REFERENCE: [(&str, u32, u32, u32); 11] = [
        ("", 0x811c_9dc5, 5, 5),
        ("a", 0xe40c_292c, 4, 4),
        ("b", 0xe70c_2de5, 3, 11),
        ("acme", 0x45fd_71af, 7, 15),
        ("user-1", 0xf553_7974, 4, 12),
        ("user-2", 0xf853_7e2d, 3, 3),
        ("order:42", 0x491d_b2f1, 1, 1),
        ("hello", 0x4f9f_2cab, 3, 11),
        ("\u{e9}", 0x6c0b_6c44, 4, 4),
        ("\u{1f600}", 0xcb31_c4b8, 0, 8),
        ("foobar", 0xbf9c_f968, 0, 8),
    ];

    fn router_at(now_ms: i64) -> (ManualClock, Router) {
        let clock = ManualClock::new(now_ms);
        let router = Router::new(8, Arc::new(clock.clone()));
        (clock, router)
    }

    fn snapshot(observed_at: i64, pending_deliveries: u64) -> LoadSnapshot {
        LoadSnapshot {
            observed_at,
            window_ms: WINDOW_MS,
            inbound: Pressure {
                in_flight: 0,
                completed: 0,
                average_processing_ms: None,
            },
            outbound: OutboundPressure {
                pressure: Pressure {
                    in_flight: 0,
                    completed: 1,
                    average_processing_ms: Some(125.0),
                },
                pending_deliveries,
            },
        }
    }

    /// Every hash in the Part B 5.3 table, including the non-ASCII keys.
    #[test]
    fn hash_matches_reference_values() {
        for (key, hash, _, _) in REFERENCE {
            assert_eq!(fnv1a_utf16(key), hash, "hash of {key:?}");
        }
    }

    /// Every partition in the Part B 5.3 table, for 8 and 16 partitions.
    #[test]
    fn partition_matches_reference_values() {
        for (key, _, n8, n16) in REFERENCE {
            assert_eq!(partition_for(key, 8), n8, "{key:?} over 8 partitions");
            assert_eq!(partition_for(key, 16), n16, "{key:?} over 16 partitions");
        }
    }

    /// Pitfall named in Part B 5.3: hashing UTF-8 bytes gives 1e9de8c1 for "é", not the
    /// original's 6c0b6c44.
    #[test]
    fn hash_is_over_utf16_units_not_utf8_bytes() {
        let utf8_hash = "\u{e9}".bytes().fold(FNV_OFFSET_BASIS, |hash, byte| {
            (hash ^ u32::from(byte)).wrapping_mul(FNV_PRIME)
        });
        assert_eq!(utf8_hash, 0x1e9d_e8c1);
        assert_eq!(fnv1a_utf16("\u{e9}"), 0x6c0b_6c44);
    }

    /// Pitfall named in Part B 5.3: an unsigned `hash % N` sends "b" to 5, the signed absolute
    /// value to 3; only the empty key keeps the unsigned basis (5, where signed would be 3).
    #[test]
    fn partition_uses_signed_absolute_value_except_for_the_empty_key() {
        assert_eq!(fnv1a_utf16("b") % 8, 5);
        assert_eq!(partition_for("b", 8), 3);
        assert_eq!(fnv1a_utf16("").cast_signed().unsigned_abs() % 8, 3);
        assert_eq!(partition_for("", 8), 5);
    }

    /// A key hashing to i32::MIN has magnitude 2^31 (the original's `Math.abs`), not an
    /// overflow or a negative remainder: 2^31 mod 3 = 2.
    #[test]
    fn hash_of_i32_min_uses_its_full_magnitude() {
        let key = "min-rfs\u{81ff}";
        assert_eq!(fnv1a_utf16(key), 0x8000_0000);
        assert_eq!(partition_for(key, 3), 2);
        assert_eq!(partition_for(key, 8), 0);
    }

    /// Shard names are `{topic}:{partition}`.
    #[test]
    fn shard_name_joins_topic_and_partition() {
        assert_eq!(shard_name("orders", 3), "orders:3");
    }

    /// One batch per partition, in input order, each event with its input index.
    #[test]
    fn group_keeps_input_order_and_indices() {
        let (_, router) = router_at(0);
        assert_eq!(router.partitions(), 8);
        let events = vec![
            ("b", "first"),
            ("a", "second"),
            ("user-2", "third"),
            ("user-1", "fourth"),
            ("b", "fifth"),
        ];
        let batches = router.group(events, |event| event.0);
        assert_eq!(
            batches,
            BTreeMap::from([
                (
                    3,
                    vec![
                        (0, ("b", "first")),
                        (2, ("user-2", "third")),
                        (4, ("b", "fifth"))
                    ]
                ),
                (4, vec![(1, ("a", "second")), (3, ("user-1", "fourth"))]),
            ])
        );
    }

    /// Part B §6 case 46: a returned observation is a copy; changing it leaves the stored one
    /// as it was.
    #[test]
    fn observations_are_copies() {
        let (_, router) = router_at(100_000);
        router.observe(2, snapshot(100_000, 12));

        let mut seen = router.observation(2).expect("observed");
        assert_eq!(seen.outbound.pressure.completed, 1);
        assert_eq!(seen.outbound.pressure.average_processing_ms, Some(125.0));
        assert_eq!(seen.outbound.pending_deliveries, 12);
        seen.outbound.pending_deliveries = 0;
        seen.outbound.pressure.completed = 9;
        assert_ne!(seen, snapshot(100_000, 12));

        assert_eq!(router.observation(2), Some(snapshot(100_000, 12)));
    }

    /// A newer (or equally new) snapshot replaces the stored one; an older one is ignored.
    #[test]
    fn newer_observation_wins() {
        let (_, router) = router_at(100_000);
        router.observe(1, snapshot(100_000, 5));
        router.observe(1, snapshot(99_000, 50));
        assert_eq!(router.observation(1), Some(snapshot(100_000, 5)));
        router.observe(1, snapshot(100_000, 6));
        assert_eq!(router.observation(1), Some(snapshot(100_000, 6)));
        assert_eq!(router.observation(0), None);
    }

    /// An observation is visible until `window_ms` has passed on the router's clock.
    #[test]
    fn observation_expires_after_its_window() {
        let (clock, router) = router_at(100_000);
        router.observe(0, snapshot(100_000, 1));
        clock.advance(59_999);
        assert!(router.observation(0).is_some());
        clock.advance(1);
        assert_eq!(router.observation(0), None);
    }

    /// At most 1,024 partitions are remembered; the oldest observation makes room.
    #[test]
    fn remembers_at_most_1024_partitions() {
        let (_, router) = router_at(100_000);
        for partition in 0..=1_024 {
            router.observe(partition, snapshot(90_000 + i64::from(partition), 0));
        }
        assert_eq!(router.lock().len(), 1_024);
        assert_eq!(router.observation(0), None);
        assert!(router.observation(1).is_some());
        assert!(router.observation(1_024).is_some());
    }
}

//! Routing: which partition an event belongs to, and which volume holds a partition.
//!
//! The partitioning function is the original library's: producers written against
//! the original and against this crate must send the same key to the same partition, so its
//! quirks (UTF-16 code units, signed absolute value, the empty key) are reproduced exactly.

use crate::names::PartitionId;

/// 32-bit FNV-1a offset basis (0x811C9DC5).
const FNV_OFFSET_BASIS: u32 = 2_166_136_261;

/// 32-bit FNV-1a prime (0x01000193).
const FNV_PRIME: u32 = 16_777_619;

/// 32-bit FNV-1a over the key's UTF-16 code units (not its UTF-8 bytes), because that is what
/// the original computes on JavaScript strings: "é" is one unit (0x00E9), "😀" is two
/// (a surrogate pair).
pub fn fnv1a_utf16(key: &str) -> u32 {
    key.encode_utf16().fold(FNV_OFFSET_BASIS, |hash, unit| {
        (hash ^ u32::from(unit)).wrapping_mul(FNV_PRIME)
    })
}

/// The volume (`0..volumes`) that holds partition `id`: [`fnv1a_utf16`] of its name
/// (`topic:index`), modulo the count. A node's new partitions, and a cluster's placement, both
/// follow it.
pub fn volume_of(id: &PartitionId, volumes: usize) -> usize {
    volume_of_key(&id.to_string(), volumes)
}

/// The volume (`0..volumes`) that a name maps to: [`fnv1a_utf16`] of it, modulo the count.
/// A partition's is that of `topic:index`; a Kafka consumer group's, of its name.
pub fn volume_of_key(key: &str, volumes: usize) -> usize {
    fnv1a_utf16(key) as usize % volumes.max(1)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The original's reference values: (key, hash, partition for N = 8, for N = 16).
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

    /// Every hash in the reference table, including the non-ASCII keys.
    #[test]
    fn hash_matches_reference_values() {
        for (key, hash, _, _) in REFERENCE {
            assert_eq!(fnv1a_utf16(key), hash, "hash of {key:?}");
        }
    }

    /// Every partition in the reference table, for 8 and 16 partitions.
    #[test]
    fn partition_matches_reference_values() {
        for (key, _, n8, n16) in REFERENCE {
            assert_eq!(partition_for(key, 8), n8, "{key:?} over 8 partitions");
            assert_eq!(partition_for(key, 16), n16, "{key:?} over 16 partitions");
        }
    }

    /// A known pitfall: hashing UTF-8 bytes gives 1e9de8c1 for "é", not the
    /// original's 6c0b6c44.
    #[test]
    fn hash_is_over_utf16_units_not_utf8_bytes() {
        let utf8_hash = "\u{e9}".bytes().fold(FNV_OFFSET_BASIS, |hash, byte| {
            (hash ^ u32::from(byte)).wrapping_mul(FNV_PRIME)
        });
        assert_eq!(utf8_hash, 0x1e9d_e8c1);
        assert_eq!(fnv1a_utf16("\u{e9}"), 0x6c0b_6c44);
    }

    /// A known pitfall: an unsigned `hash % N` sends "b" to 5, the signed absolute
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
}

//! Where things go in a cluster: a partition's volume is a pure function of its name, and each
//! volume goes to the live node that rendezvous hashing picks, so every node computes the same
//! answers from the same members, and a member's coming or going moves only its share.

pub use crate::routing::volume_of;

/// The node among `nodes` that rendezvous hashing picks for volume `volume`: the one whose
/// score for it is highest (ties, which need equal names, go to the first).
pub fn owner_of<'a>(volume: usize, nodes: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    nodes
        .into_iter()
        .map(|node| (score(node, volume), node))
        .fold(None, |best: Option<(u64, &str)>, candidate| match best {
            Some(best) if best.0 >= candidate.0 => Some(best),
            _ => Some(candidate),
        })
        .map(|(_, node)| node)
}

/// A node's score for a volume: 64-bit FNV-1a of the node's name and the volume's number, then
/// a finalizer that spreads nearby inputs over the whole range.
fn score(node: &str, volume: usize) -> u64 {
    const BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = node.bytes().chain([0]).chain((volume as u64).to_le_bytes());
    let hash = bytes.fold(BASIS, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    // splitmix64's finalizer.
    let mut x = hash;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::PartitionId;

    /// The picks spread volumes about evenly, and a node leaving moves only the volumes it
    /// had: every other volume keeps its owner.
    #[test]
    fn rendezvous_spreads_and_moves_only_the_leavers_share() {
        let nodes = ["a", "b", "c"];
        let before: Vec<&str> = (0..256)
            .map(|volume| owner_of(volume, nodes).unwrap())
            .collect();
        for node in nodes {
            let share = before.iter().filter(|&&owner| owner == node).count();
            assert!((50..=120).contains(&share), "{node} has {share} of 256");
        }
        let after: Vec<&str> = (0..256)
            .map(|volume| owner_of(volume, ["a", "c"]).unwrap())
            .collect();
        for volume in 0..256 {
            if before[volume] != "b" {
                assert_eq!(before[volume], after[volume], "volume {volume} moved");
            }
        }
        assert_eq!(owner_of(3, []), None);
    }

    /// A partition's volume is its name's FNV-1a hash modulo the count, the same that the
    /// volumes of one node spread new partitions with.
    #[test]
    fn a_partitions_volume_follows_its_name() {
        let id = PartitionId::new("orders", 3).unwrap();
        let hash = crate::routing::fnv1a_utf16("orders:3") as usize;
        assert_eq!(volume_of(&id, 256), hash % 256);
        assert_eq!(volume_of(&id, 1), 0);
    }
}

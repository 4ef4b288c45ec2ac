//! The check a replicated node makes of its bucket before it claims anything: that the bucket
//! honours conditional writes.
//!
//! Everything that keeps two owners of a volume from both acknowledging writes rests on them: a
//! window is created only where nothing is (`If-None-Match: *`), so a fence stops a stale
//! writer, and a manifest is replaced only if unchanged (`If-Match`). A bucket that ignores
//! them (or a proxy in front of it that strips the headers) answers each such write "stored",
//! and nothing else would tell before acknowledged writes were lost.
//!
//! The probe uses an object of its own, `{prefix}/probe/{node}-{id}` (see [`Keys::probe`]): it
//! creates it create-only, creates it again create-only (the condition must fail), replaces it
//! naming its ETag (it must be stored), then naming its first, stale ETag (the condition must
//! fail), and deletes it.

use std::path::Path;

use super::format::Keys;
use super::{REQUEST_TIMEOUT, ReplicaError};
use crate::cold::S3Settings;
use crate::cold::s3::{Objects, Put};
use crate::config::ReplicationSettings;

/// Checks that `objects`' bucket honours `If-None-Match: *` and `If-Match` on PUT, with a probe
/// object of node `node` under `keys`' prefix, which it deletes.
///
/// # Errors
/// [`ReplicaError::Unsuited`] naming the bucket and the conditions it does not honour;
/// [`ReplicaError::Bucket`] when it cannot be reached or answers a failure.
pub(super) async fn conditional_writes(
    objects: &Objects,
    keys: &Keys,
    node: &str,
) -> Result<(), ReplicaError> {
    let key = keys.probe(node, &uuid::Uuid::new_v4().simple().to_string());
    let ignored = match objects.create(&key, &probe_bytes(1)).await? {
        Put::Stored(first) => {
            let ignored = ignored_conditions(objects, &key, &first).await;
            // Whatever the outcome (one left behind is harmless: nothing reads `probe/`).
            if let Err(err) = objects.delete(&key).await {
                log::warn!("replica: deleting the probe object failed: {err}");
            }
            ignored?
        }
        Put::ConditionFailed => {
            vec!["If-None-Match (a create-only PUT of a new object was refused)"]
        }
    };
    if ignored.is_empty() {
        return Ok(());
    }
    Err(ReplicaError::Unsuited(format!(
        "bucket {} does not honour {}: a replicated log needs conditional writes to fence a \
         previous owner (without them two servers on the bucket both acknowledge writes, and \
         lose some), so it refuses to start",
        objects.name(),
        ignored.join(" nor ")
    )))
}

/// The probe's bytes at step `step`: other bytes at each, since S3's ETag is a digest of them.
fn probe_bytes(step: u8) -> Vec<u8> {
    format!("durability's conditional-write probe, step {step}").into_bytes()
}

/// The conditions the bucket does not honour on the object at `key`, just created with ETag
/// `first`: each as its header and what showed it.
async fn ignored_conditions(
    objects: &Objects,
    key: &str,
    first: &str,
) -> Result<Vec<&'static str>, ReplicaError> {
    let mut ignored = Vec::new();
    let current = match objects.create(key, &probe_bytes(2)).await? {
        Put::ConditionFailed => first.to_owned(),
        Put::Stored(etag) => {
            ignored.push("If-None-Match (a create-only PUT over an existing object succeeded)");
            etag
        }
    };
    if objects.replace(key, &probe_bytes(3), &current).await? == Put::ConditionFailed {
        ignored.push("If-Match (a PUT naming the object's current ETag was refused)");
        return Ok(ignored);
    }
    if let Put::Stored(_) = objects.replace(key, &probe_bytes(4), first).await? {
        ignored.push("If-Match (a PUT naming a stale ETag succeeded)");
    }
    Ok(ignored)
}

/// [`conditional_writes`] against `s3`'s bucket, under `replication`'s prefix, on a thread of
/// its own: blocks until it is done (a few requests, each waited for at most
/// [`REQUEST_TIMEOUT`]).
///
/// # Errors
/// As [`conditional_writes`]; [`ReplicaError::Bucket`] when `s3` makes no client too.
pub(crate) fn check_bucket(
    s3: &S3Settings,
    replication: &ReplicationSettings,
) -> Result<(), ReplicaError> {
    let objects = Objects::new(s3, Some(REQUEST_TIMEOUT))?;
    let keys = Keys::new(&replication.prefix);
    let node = replication.node();
    let (checked, outcome) = std::sync::mpsc::channel();
    crate::background::spawn("durability-probe", move || async move {
        let _ = checked.send(conditional_writes(&objects, &keys, &node).await);
    })
    .map_err(|err| ReplicaError::io(Path::new("durability-probe"), err))?;
    outcome
        .recv()
        .map_err(|_| ReplicaError::Stopped("probe's thread"))?
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cold::s3::memory::{Ignores, MemoryBucket};
    use crate::config::ReplicationKind;
    use crate::replica::Node;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    fn probe(bucket: &Arc<MemoryBucket>) -> Result<(), ReplicaError> {
        let objects = Objects::memory(bucket.clone());
        block_on(conditional_writes(&objects, &Keys::new("replica"), "a"))
    }

    /// The message of a refusal.
    fn refusal(outcome: Result<(), ReplicaError>) -> String {
        match outcome {
            Err(ReplicaError::Unsuited(why)) => why,
            other => panic!("a refusal expected: {other:?}"),
        }
    }

    /// The bucket in memory honours both conditions, as S3 does: the probe passes and leaves
    /// nothing behind.
    #[test]
    fn a_bucket_honouring_conditional_writes_passes_and_keeps_nothing() {
        let bucket = MemoryBucket::new();
        probe(&bucket).expect("the probe passes");
        assert!(bucket.dump().is_empty(), "{:?}", bucket.dump());
    }

    /// A bucket ignoring either condition is refused with a sentence naming it, the condition
    /// and why that is unsafe; the probe object is deleted all the same.
    #[test]
    fn a_bucket_ignoring_a_condition_is_refused_naming_it() {
        let cases = [
            (
                Ignores {
                    if_none_match: true,
                    if_match: false,
                },
                "bucket memory does not honour If-None-Match (a create-only PUT over an \
                 existing object succeeded): a replicated log needs conditional writes",
            ),
            (
                Ignores {
                    if_none_match: false,
                    if_match: true,
                },
                "bucket memory does not honour If-Match (a PUT naming a stale ETag \
                 succeeded): a replicated log needs conditional writes",
            ),
            (
                Ignores {
                    if_none_match: true,
                    if_match: true,
                },
                "bucket memory does not honour If-None-Match (a create-only PUT over an \
                 existing object succeeded) nor If-Match (a PUT naming a stale ETag succeeded)",
            ),
        ];
        for (ignores, expected) in cases {
            let bucket = MemoryBucket::ignoring(ignores);
            let why = refusal(probe(&bucket));
            assert!(why.starts_with(expected), "{ignores:?}: {why}");
            assert!(why.ends_with("so it refuses to start"), "{why}");
            assert!(bucket.dump().is_empty(), "{ignores:?}: {:?}", bucket.dump());
        }
    }

    /// A node does not claim an incarnation in a bucket that ignores the conditions: it is
    /// refused before it writes anything of its own (not even the volume count).
    #[test]
    fn a_node_refuses_to_claim_in_a_bucket_ignoring_conditions() {
        let bucket = MemoryBucket::ignoring(Ignores {
            if_none_match: true,
            if_match: true,
        });
        let dir = tempfile::tempdir().expect("a folder");
        let settings = ReplicationSettings {
            kind: ReplicationKind::S3,
            prefix: "replica".to_owned(),
            node_id: "a".to_owned(),
            commit_linger_ms: 0,
            max_window_bytes: 1 << 20,
            max_puts_in_flight: 2,
            put_retry_ms: 10_000,
            snapshot_bytes: u64::MAX,
            snapshot_interval_ms: u64::MAX,
            snapshot_windows: u64::MAX,
            gc_grace_ms: 0,
        };
        let claimed = block_on(Node::claim(
            Objects::memory(bucket.clone()),
            &settings,
            dir.path().to_owned(),
            1,
            None,
            Arc::default(),
        ));
        let why = refusal(claimed.map(|_| ()));
        assert!(why.contains("does not honour If-None-Match"), "{why}");
        assert!(bucket.dump().is_empty(), "{:?}", bucket.dump());
    }
}

//! Cursors of a `LogStore`: consumer groups commit independently and never move back, a
//! commit consumes nothing and may not pass `next_offset`, a deleted cursor stops counting,
//! group names follow the naming rules, and the backlog is counted from the slowest cursor
//! (README: "Guarantees"; the `consume` operations of `GET /openapi.json`).

use std::collections::BTreeMap;

use durability::store::StoreError;

use crate::common::{ReadNow, TestStore, append_ok, plain};

/// Consumers commit independently, and committing consumes nothing.
#[test]
fn consumers_commit_independently_and_history_stays_readable() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b"]));
    assert_eq!(t.store.cursor("search").unwrap(), None);

    assert_eq!(t.store.commit("search", 2).unwrap(), 2);
    assert_eq!(t.store.commit("billing", 1).unwrap(), 1);
    let expected = BTreeMap::from([("billing".to_owned(), 1), ("search".to_owned(), 2)]);
    assert_eq!(t.store.cursors().unwrap(), expected);
    assert_eq!(t.store.cursor("search").unwrap(), Some(2));
    assert_eq!(t.store.cursor("billing").unwrap(), Some(1));

    assert_eq!(t.store.read_now(Some(0), None).unwrap().records.len(), 2);
}

/// A commit at or below the cursor changes nothing and answers the cursor in effect.
#[test]
fn cursor_regressions_are_ignored() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    assert_eq!(t.store.commit("search", 3).unwrap(), 3);
    assert_eq!(
        t.store.commit("search", 1).unwrap(),
        3,
        "the regression answers the kept cursor"
    );
    assert_eq!(t.store.commit("search", 3).unwrap(), 3);
    assert_eq!(t.store.cursor("search").unwrap(), Some(3));
}

/// A commit beyond `next_offset` is an invalid offset and changes nothing (nor does it
/// poison the store); a commit of exactly `next_offset` is fine.
#[test]
fn commit_beyond_next_offset_is_invalid_offset_and_changes_nothing() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c"]));

    let err = t.store.commit("search", 4).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InvalidOffset {
                offset: 4,
                next_offset: 3
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.code(), "invalid_offset");
    assert_eq!(t.store.cursor("search").unwrap(), None);
    assert!(t.store.cursors().unwrap().is_empty());

    t.store.commit("search", 1).unwrap();
    let err = t.store.commit("search", 10).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InvalidOffset {
                offset: 10,
                next_offset: 3
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        t.store.cursor("search").unwrap(),
        Some(1),
        "the cursor kept its value"
    );

    assert!(!t.store.is_poisoned(), "a definite error does not poison");
    assert_eq!(
        t.store.commit("search", 3).unwrap(),
        3,
        "committing next_offset is valid"
    );
    assert_eq!(append_ok(&t.store, &plain(&["d"])), vec![3]);
}

/// Deleting a cursor removes it from the listing and the backlog, and a later commit
/// may start below where it was.
#[test]
fn deleted_cursor_stops_counting_and_may_restart_lower() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c", "d"]));
    t.store.commit("slow", 1).unwrap();
    t.store.commit("fast", 4).unwrap();
    assert_eq!(t.store.pending_deliveries().unwrap(), 3);

    assert!(
        t.store.delete_cursor("slow").unwrap(),
        "there was a cursor to delete"
    );
    assert!(!t.store.delete_cursor("slow").unwrap(), "it is gone now");
    assert_eq!(t.store.cursor("slow").unwrap(), None);
    assert_eq!(
        t.store.cursors().unwrap(),
        BTreeMap::from([("fast".to_owned(), 4)])
    );
    assert_eq!(
        t.store.pending_deliveries().unwrap(),
        0,
        "the deleted cursor no longer counts"
    );

    assert!(t.store.delete_cursor("fast").unwrap());
    assert_eq!(
        t.store.commit("fast", 2).unwrap(),
        2,
        "a lower commit is accepted after deletion"
    );
    assert_eq!(t.store.cursor("fast").unwrap(), Some(2));
    assert_eq!(t.store.pending_deliveries().unwrap(), 2);

    assert!(!t.store.delete_cursor("never-committed").unwrap());
}

/// Group names that break the naming rules are refused by every cursor operation, and refusing
/// them changes nothing.
#[test]
fn invalid_group_names_are_refused() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a"]));
    for name in ["", "a b"] {
        let err = t.store.commit(name, 1).unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidName(_)),
            "commit {name:?}: {err:?}"
        );
        assert_eq!(err.code(), "invalid_name");
        let err = t.store.cursor(name).unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidName(_)),
            "cursor {name:?}: {err:?}"
        );
        let err = t.store.delete_cursor(name).unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidName(_)),
            "delete_cursor {name:?}: {err:?}"
        );
    }
    assert!(t.store.cursors().unwrap().is_empty());
    assert!(!t.store.is_poisoned());
    assert_eq!(
        t.store.commit("group-1.a_b:c", 1).unwrap(),
        1,
        "a name using every allowed sign"
    );
}

/// The backlog is counted from the slowest cursor, and is 0 without cursors.
#[test]
fn backlog_counts_from_the_slowest_cursor() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    assert_eq!(
        t.store.pending_deliveries().unwrap(),
        0,
        "no cursor, no backlog"
    );

    t.store.commit("search", 3).unwrap();
    t.store.commit("billing", 1).unwrap();
    assert_eq!(t.store.pending_deliveries().unwrap(), 2);

    t.store.commit("billing", 3).unwrap();
    assert_eq!(t.store.pending_deliveries().unwrap(), 0);
}

/// A fast and a slow consumer leave the slow one's backlog.
#[test]
fn backlog_is_the_slow_consumers_distance_to_the_end() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["e1", "e2", "e3"]));
    t.store.commit("fast", 3).unwrap();
    t.store.commit("slow", 1).unwrap();
    assert_eq!(t.store.pending_deliveries().unwrap(), 2);
}

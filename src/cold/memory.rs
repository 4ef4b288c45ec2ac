//! Test doubles: an in-memory cold store and a wrapper that fails on demand.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::{ColdFuture, ColdStore, ColdStoreError, PutOutcome, SegmentKey};
use crate::sync::lock;

/// Segments in a map, for tests and for embedders' tests.
#[derive(Debug, Default)]
pub struct MemoryColdStore {
    objects: Mutex<BTreeMap<SegmentKey, Vec<u8>>>,
}

impl MemoryColdStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many objects it holds.
    pub fn len(&self) -> usize {
        self.objects().len()
    }

    /// Whether it holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every object, as an expiring bucket lifecycle rule would.
    pub fn clear(&self) {
        self.objects().clear();
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<SegmentKey, Vec<u8>>> {
        lock(&self.objects)
    }
}

impl ColdStore for MemoryColdStore {
    fn put<'a>(&'a self, key: &'a SegmentKey, bytes: &'a [u8]) -> ColdFuture<'a, PutOutcome> {
        let mut objects = self.objects();
        let outcome = if objects.contains_key(key) {
            PutOutcome::AlreadyExists
        } else {
            objects.insert(key.clone(), bytes.to_vec());
            PutOutcome::Created
        };
        Box::pin(async move { Ok(outcome) })
    }

    fn get<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, Option<Vec<u8>>> {
        let object = self.objects().get(key).cloned();
        Box::pin(async move { Ok(object) })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> ColdFuture<'a, Vec<SegmentKey>> {
        let keys = self
            .objects()
            .keys()
            .filter(|key| key.as_str().starts_with(prefix))
            .cloned()
            .collect();
        Box::pin(async move { Ok(keys) })
    }

    fn delete<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, ()> {
        self.objects().remove(key);
        Box::pin(async move { Ok(()) })
    }
}

/// Where a [`FailingColdStore`] fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColdStep {
    /// `put` fails without storing anything.
    BeforeWrite,
    /// `put` stores the object, then reports a failure (a lost acknowledgement).
    AfterWrite,
    /// `get` fails (the store is unreachable for reads).
    Read,
    /// `delete` fails without removing anything.
    Delete,
}

/// Wraps a cold store and fails at the chosen steps until told otherwise.
#[derive(Debug)]
pub struct FailingColdStore {
    inner: Arc<dyn ColdStore>,
    failing: Mutex<Vec<ColdStep>>,
}

impl FailingColdStore {
    /// Wraps `inner`, failing nowhere yet.
    pub fn new(inner: Arc<dyn ColdStore>) -> Self {
        Self {
            inner,
            failing: Mutex::new(Vec::new()),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn ColdStore> {
        &self.inner
    }

    /// Fails at `step` from now on.
    pub fn fail_at(&self, step: ColdStep) {
        self.failing().push(step);
    }

    /// Fails at every step: the store is down.
    pub fn go_down(&self) {
        *self.failing() = vec![ColdStep::BeforeWrite, ColdStep::Read, ColdStep::Delete];
    }

    /// Stops failing.
    pub fn recover(&self) {
        self.failing().clear();
    }

    fn fails_at(&self, step: ColdStep) -> bool {
        self.failing().contains(&step)
    }

    fn failing(&self) -> std::sync::MutexGuard<'_, Vec<ColdStep>> {
        lock(&self.failing)
    }
}

impl ColdStore for FailingColdStore {
    fn put<'a>(&'a self, key: &'a SegmentKey, bytes: &'a [u8]) -> ColdFuture<'a, PutOutcome> {
        Box::pin(async move {
            if self.fails_at(ColdStep::BeforeWrite) {
                return Err(ColdStoreError::Injected("before write"));
            }
            let outcome = self.inner.put(key, bytes).await?;
            if self.fails_at(ColdStep::AfterWrite) {
                return Err(ColdStoreError::Injected("after write"));
            }
            Ok(outcome)
        })
    }

    fn get<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            if self.fails_at(ColdStep::Read) {
                return Err(ColdStoreError::Injected("read"));
            }
            self.inner.get(key).await
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> ColdFuture<'a, Vec<SegmentKey>> {
        self.inner.list(prefix)
    }

    fn delete<'a>(&'a self, key: &'a SegmentKey) -> ColdFuture<'a, ()> {
        Box::pin(async move {
            if self.fails_at(ColdStep::Delete) {
                return Err(ColdStoreError::Injected("delete"));
            }
            self.inner.delete(key).await
        })
    }
}

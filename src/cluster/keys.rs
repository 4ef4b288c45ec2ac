//! What the cluster needs of its key store: the handful of etcd calls that membership and
//! ownership are made of. [`Etcd`](super::etcd::Etcd) is the store a cluster runs on; the unit
//! tests run the cluster's pieces over [`memory::MemoryKeyStore`], which keeps etcd's semantics
//! in memory on a clock the test moves.
//!
//! The calls answer boxed futures, so that the cluster holds its store as `Arc<dyn KeyStore>`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;

use super::etcd::{EtcdError, KeyValue, LeaseId, WatchEvent};

#[cfg(test)]
pub(crate) mod memory;

/// What a call to the key store answers, once it does.
pub(crate) type KeyFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, EtcdError>> + Send + 'a>>;

/// A watch: batches of events, in the store's order (see [`KeyStore::watch`]).
pub(crate) type WatchStream =
    Pin<Box<dyn Stream<Item = Result<Vec<WatchEvent>, EtcdError>> + Send + 'static>>;

/// A key store with etcd's semantics: every write bumps the store's revision and stamps the
/// keys it writes with it, keys may live under a lease that expires unless kept alive, and a
/// lease that ends (expired or revoked) deletes its keys.
pub(crate) trait KeyStore: Send + Sync {
    /// Grants a lease of `ttl` (etcd rounds it up to whole seconds).
    fn grant(&self, ttl: Duration) -> KeyFuture<'_, LeaseId>;

    /// Keeps the lease alive once: `Ok(false)` when the store no longer knows it (expired or
    /// revoked).
    fn keep_alive(&self, lease: LeaseId) -> KeyFuture<'_, bool>;

    /// Ends the lease and deletes its keys; `Ok` also when the store no longer knows it.
    fn revoke(&self, lease: LeaseId) -> KeyFuture<'_, ()>;

    /// Puts key = value (under `lease` when not 0) only if the key does not exist; true when it
    /// was created.
    fn create<'a>(&'a self, key: &'a str, value: &'a [u8], lease: LeaseId) -> KeyFuture<'a, bool>;

    /// Puts key = value (under `lease` when not 0) unconditionally.
    fn put<'a>(&'a self, key: &'a str, value: &'a [u8], lease: LeaseId) -> KeyFuture<'a, ()>;

    /// Deletes key only if it holds exactly `value`; true when deleted.
    fn delete_if<'a>(&'a self, key: &'a str, value: &'a [u8]) -> KeyFuture<'a, bool>;

    /// Every key starting with `prefix`, sorted by key, and the store's revision at the read.
    fn prefix<'a>(&'a self, prefix: &'a str) -> KeyFuture<'a, (Vec<KeyValue>, i64)>;

    /// Watches every key starting with `prefix` from `start_revision` on (included: to follow
    /// a [`KeyStore::prefix`] read, pass its revision + 1). The stream ends, or yields `Err`
    /// and then ends, when the watch is cut off: the caller reads again and watches anew.
    fn watch(&self, prefix: &str, start_revision: i64) -> WatchStream;

    /// A client of the same store that shares no connection with this one: the lease keeper
    /// runs on a runtime of its own, which must not wait on this client's connections.
    fn client_of_its_own(&self) -> Arc<dyn KeyStore>;
}

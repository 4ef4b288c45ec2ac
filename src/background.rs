//! A thread of its own running a tokio runtime, for the work that talks to the bucket or to etcd
//! off the actors' and the HTTP workers' threads.

use std::future::Future;

/// Starts thread `name` running `task` to its end on a current-thread runtime with I/O and
/// timers; the runtime's handle lets other threads spawn tasks on it meanwhile.
///
/// # Errors
/// When the runtime or the thread cannot be had.
pub(crate) fn spawn<F>(
    name: &str,
    task: impl FnOnce() -> F + Send + 'static,
) -> std::io::Result<tokio::runtime::Handle>
where
    F: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || runtime.block_on(task()))?;
    Ok(handle)
}

//! Returning freed memory to the operating system.

/// Hands the memory that the allocator holds free back to the operating system. The allocator
/// keeps freed memory for reuse otherwise, and an idle process would stay at its peak.
pub(crate) fn return_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

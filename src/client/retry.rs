//! When a failed call is tried again, and how long the client waits first: the client's retry
//! rules, in one place.
//!
//! What may be repeated depends on the operation ([`Operation::repeat`]): reads, forward-only
//! commits and writes whose every record carries a deduplication key change nothing more when
//! repeated, so they are tried again whenever the outcome is unknown; the others (a lease
//! claim, an ack, ...) only when the server surely did not apply them. A 4xx is definite and
//! never retried.

use std::time::Duration;

/// How many times, and for how long, a failed call is tried (see the module's rules for which
/// failures are). Waits grow exponentially up to a cap, each with random jitter; a `503` that
/// says `Retry-After` is waited for as it asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct RetryPolicy {
    /// Attempts in all, the first included: 1 never retries.
    /// Default: 20, so that the deadline, not the count, ends the retries of a write waiting
    /// out a failover (a node's lease, 5 s by default, then its volumes' take, each refusal
    /// answered `503` with `Retry-After: 1`).
    pub attempts: u32,
    /// No attempt starts later than this after the call began: a retry whose wait would end
    /// past it is not made.
    /// Default: 30 s.
    pub deadline: Duration,
    /// The wait before the first retry, doubled before each next one.
    /// Default: 100 ms.
    pub first_backoff: Duration,
    /// The longest wait between two attempts (a `Retry-After` may ask longer).
    /// Default: 5 s.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 20,
            deadline: Duration::from_secs(30),
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// One attempt, never retried.
    pub fn never() -> Self {
        Self {
            attempts: 1,
            ..Self::default()
        }
    }

    /// Sets [`RetryPolicy::attempts`] (at least 1).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// Sets [`RetryPolicy::deadline`].
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Sets [`RetryPolicy::first_backoff`] and [`RetryPolicy::max_backoff`].
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.first_backoff = first;
        self.max_backoff = max;
        self
    }

    /// The wait before retry number `retry` (1 for the first) after `failure`: what its
    /// `Retry-After` asks, else the exponential backoff, capped, of which a random part (up to
    /// half) is left out so that clients failed together do not retry together.
    pub(crate) fn wait(&self, retry: u32, failure: &Failure) -> Duration {
        if let Failure::Unavailable {
            retry_after: Some(asked),
            ..
        } = failure
        {
            return *asked;
        }
        let doubled = self
            .first_backoff
            .saturating_mul(1 << retry.saturating_sub(1).min(30));
        let capped = doubled.min(self.max_backoff);
        let random = uuid::Uuid::new_v4().as_u64_pair().0;
        capped.mul_f64(1.0 - 0.5 * (random as f64 / u64::MAX as f64))
    }
}

/// Whether repeating an operation could change more than doing it once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Repeating changes nothing more: a read, a forward-only commit, a write whose every
    /// record carries a deduplication key. Tried again whenever the outcome is unknown.
    Harmless,
    /// Repeating could apply it twice (claim a second range, nack a redelivery): tried again
    /// only when it surely was not applied.
    OnlyIfUnapplied,
}

/// Every operation of the client, for its retry rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Append,
    Produce,
    Read,
    Poll,
    Commit,
    Cursors,
    PutCursor,
    DeleteCursor,
    Claim,
    ClaimAny,
    Leases,
    Ack,
    Nack,
    Extend,
    Bounds,
    Load,
    Trim,
    ForgetCold,
    Topics,
    Describe,
    Cluster,
}

impl Operation {
    /// Whether repeating the operation is harmless. Appends and produces are, because the
    /// client gives every record without a deduplication key one before the first attempt.
    pub(crate) fn repeat(self) -> Repeat {
        match self {
            Self::Append
            | Self::Produce
            | Self::Read
            | Self::Poll
            | Self::Commit
            | Self::Cursors
            | Self::Leases
            | Self::Bounds
            | Self::Load
            | Self::Topics
            | Self::Describe
            | Self::Cluster => Repeat::Harmless,
            Self::PutCursor
            | Self::DeleteCursor
            | Self::Claim
            | Self::ClaimAny
            | Self::Ack
            | Self::Nack
            | Self::Extend
            | Self::Trim
            | Self::ForgetCold => Repeat::OnlyIfUnapplied,
        }
    }
}

/// How an attempt failed, as far as retrying it is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No connection could be made: nothing was sent.
    NotConnected,
    /// Sent, and no whole answer came (timed out, connection cut): applied or not, unknown.
    NoAnswer,
    /// `503`: `overloaded` was refused at admission and changed nothing; otherwise
    /// (`unavailable`) the request may have been applied.
    Unavailable {
        /// Whether the code is `overloaded`.
        overloaded: bool,
        /// The wait `Retry-After` asks for, if it was sent.
        retry_after: Option<Duration>,
    },
    /// Any other answer: final (a 4xx is definite, `500 corrupted` does not heal).
    Final,
}

impl Failure {
    /// Whether an operation that `repeat`s so is tried again after this failure.
    pub(crate) fn retried(&self, repeat: Repeat) -> bool {
        match self {
            Self::NotConnected
            | Self::Unavailable {
                overloaded: true, ..
            } => true,
            Self::NoAnswer
            | Self::Unavailable {
                overloaded: false, ..
            } => repeat == Repeat::Harmless,
            Self::Final => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A harmless operation is retried whenever the outcome is unknown; the others only when
    /// the server surely did not apply them; a final answer never.
    #[test]
    fn what_is_retried_depends_on_the_harm_of_repeating() {
        let unavailable = Failure::Unavailable {
            overloaded: false,
            retry_after: None,
        };
        let overloaded = Failure::Unavailable {
            overloaded: true,
            retry_after: Some(Duration::from_secs(1)),
        };
        for (failure, harmless, unapplied_only) in [
            (Failure::NotConnected, true, true),
            (overloaded, true, true),
            (Failure::NoAnswer, true, false),
            (unavailable, true, false),
            (Failure::Final, false, false),
        ] {
            assert_eq!(failure.retried(Repeat::Harmless), harmless, "{failure:?}");
            assert_eq!(
                failure.retried(Repeat::OnlyIfUnapplied),
                unapplied_only,
                "{failure:?}"
            );
        }
        assert_eq!(Operation::Append.repeat(), Repeat::Harmless);
        assert_eq!(Operation::Commit.repeat(), Repeat::Harmless);
        assert_eq!(Operation::Ack.repeat(), Repeat::OnlyIfUnapplied);
        assert_eq!(Operation::PutCursor.repeat(), Repeat::OnlyIfUnapplied);
    }

    /// Waits double from the first backoff up to the cap, each shortened by at most half;
    /// `Retry-After` is followed as sent.
    #[test]
    fn waits_grow_to_the_cap_with_jitter() {
        let policy =
            RetryPolicy::default().backoff(Duration::from_millis(100), Duration::from_millis(500));
        for (retry, full) in [(1, 100), (2, 200), (3, 400), (4, 500), (40, 500)] {
            let full = Duration::from_millis(full);
            for _ in 0..50 {
                let wait = policy.wait(retry, &Failure::NoAnswer);
                assert!(wait <= full && wait >= full / 2, "{retry}: {wait:?}");
            }
        }
        let asked = Failure::Unavailable {
            overloaded: true,
            retry_after: Some(Duration::from_secs(7)),
        };
        assert_eq!(policy.wait(1, &asked), Duration::from_secs(7));
    }
}

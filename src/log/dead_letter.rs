//! The server's dead-letter destination: a topic of the same log.

use std::future::Future;
use std::pin::Pin;

use super::Log;
use super::produce::{Event, EventsOutcome};
use crate::error::Error;
use crate::names::PartitionId;
use crate::partition::DeadLetter;
use crate::store::Record;

/// The server's dead-letter destination: a topic, keyed by origin so a retry never duplicates.
#[derive(Debug)]
pub(super) struct DeadLetterTopic {
    pub(super) log: Log,
    pub(super) topic: String,
}

impl DeadLetter for DeadLetterTopic {
    fn store_exhausted<'a>(
        &'a self,
        origin: &'a PartitionId,
        records: &'a [Record],
    ) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>> {
        Box::pin(async move {
            let events = records
                .iter()
                .map(|record| {
                    let key = format!("{}:{}:{}", origin.topic(), origin.index(), record.offset);
                    Event {
                        partition_key: key.clone(),
                        key: Some(key),
                        payload: record.payload.clone(),
                        headers: record.headers.clone(),
                    }
                })
                .collect();
            match self.log.append_events(&self.topic, events).await? {
                EventsOutcome::Appended(_) => Ok(()),
                EventsOutcome::Rejected {
                    partition,
                    rejection,
                } => Err(Error::unavailable(
                    PartitionId::new(&self.topic, partition).ok().as_ref(),
                    "the dead-letter topic refused the records",
                    Some(Box::new(rejection)),
                )),
            }
        })
    }
}

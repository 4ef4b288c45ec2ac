//! The server's dead-letter destination: a topic of the same log; and the way back, reading
//! its letters and appending them to their sources again (a redrive).

use std::future::Future;
use std::pin::Pin;

use super::Log;
use super::produce::{Event, EventsOutcome};
use crate::error::Error;
use crate::names::PartitionId;
use crate::partition::DeadLetter;
use crate::store::{AppendOutcome, NewRecord, Record};

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

/// The most letters one redrive takes.
pub const MAX_REDRIVE: usize = 1000;

/// A record of a dead-letter topic, with the place it was sent from (read back from its
/// deduplication key, `{topic}:{partition}:{offset}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Letter {
    /// Where the letter is: its dead-letter topic's partition.
    pub at: PartitionId,
    /// Its offset there.
    pub offset: u64,
    /// The partition it came from.
    pub source: PartitionId,
    /// Its offset in `source`.
    pub source_offset: u64,
    /// The record as the dead-letter topic keeps it.
    pub record: Record,
}

impl Letter {
    /// The deduplication key of its redrive: the same for every redrive of this letter, so a
    /// repeated one (a double click, a retried request) appends nothing while the first copy
    /// is in its partition's hot window.
    pub fn redrive_key(&self) -> String {
        format!(
            "redrive:{}:{}:{}",
            self.at.topic(),
            self.at.index(),
            self.offset
        )
    }
}

/// A letter appended back to its source partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redriven {
    /// The letter.
    pub letter: Letter,
    /// Its offset in its source partition now (the first copy's, for a repeated redrive).
    pub appended_offset: u64,
}

impl Log {
    /// The letters at `offsets` of partition `partition` of the dead-letter topic `topic`.
    ///
    /// # Errors
    /// `invalid_request` for no offsets or more than [`MAX_REDRIVE`], and for an offset that
    /// holds no record or a record that is not a letter; name and partition errors;
    /// `unavailable`.
    pub async fn letters(
        &self,
        topic: &str,
        partition: u32,
        offsets: &[u64],
    ) -> Result<Vec<Letter>, Error> {
        let at = self.partition(topic, partition)?;
        if offsets.is_empty() || offsets.len() > MAX_REDRIVE {
            return Err(Error::InvalidRequest(format!(
                "offsets must hold 1 to {MAX_REDRIVE} offsets, not {}",
                offsets.len()
            )));
        }
        let mut letters = Vec::with_capacity(offsets.len());
        for &offset in offsets {
            let page = self.read(topic, partition, Some(offset), Some(1)).await?;
            let record = page
                .records
                .into_iter()
                .next()
                .filter(|record| record.offset == offset)
                .ok_or_else(|| {
                    Error::InvalidRequest(format!("{at} holds no record at offset {offset}"))
                })?;
            let (source, source_offset) = self.letter_source(&record).ok_or_else(|| {
                Error::InvalidRequest(format!(
                    "the record at offset {offset} of {at} is not a dead letter: its \
                     deduplication key is not `topic:partition:offset` of a partition"
                ))
            })?;
            letters.push(Letter {
                at: at.clone(),
                offset,
                source,
                source_offset,
                record,
            });
        }
        Ok(letters)
    }

    /// Where a letter came from: its deduplication key read as `{topic}:{partition}:{offset}`
    /// (topic names hold no `:`), naming a partition of this log.
    fn letter_source(&self, record: &Record) -> Option<(PartitionId, u64)> {
        let mut parts = record.key.as_deref()?.rsplitn(3, ':');
        let offset = parts.next()?.parse().ok()?;
        let partition = parts.next()?.parse().ok()?;
        let topic = parts.next()?;
        if partition >= self.partitions(topic).ok()? {
            return None;
        }
        Some((PartitionId::new(topic, partition).ok()?, offset))
    }

    /// Appends each letter's payload and headers back to its source partition, with the
    /// deduplication key [`Letter::redrive_key`] (not its message key: the dead-letter topic
    /// set that to its routing key). The letters of one source partition are one atomic batch,
    /// where a letter asked twice is appended once. Answers in the letters' order.
    ///
    /// # Errors
    /// A source partition's refusal (`payload_too_large`, say): the partitions before it in
    /// order of appearance were redriven, and a retry of the whole call appends them no more.
    /// `unavailable`.
    pub async fn redrive(&self, letters: Vec<Letter>) -> Result<Vec<Redriven>, Error> {
        let mut by_source: std::collections::BTreeMap<&PartitionId, Vec<usize>> =
            std::collections::BTreeMap::new();
        for (index, letter) in letters.iter().enumerate() {
            by_source.entry(&letter.source).or_default().push(index);
        }
        let mut appended = vec![0; letters.len()];
        for (source, indexes) in by_source {
            let batch = indexes
                .iter()
                .map(|&index| {
                    let letter = &letters[index];
                    let record = &letter.record;
                    NewRecord::keyed(letter.redrive_key(), record.payload.clone())
                        .with_headers(record.headers.clone())
                })
                .collect();
            let outcome = self
                .append(source.topic(), source.index(), batch)
                .await?
                .outcome;
            match outcome {
                AppendOutcome::Appended { offsets } => {
                    for (index, offset) in indexes.into_iter().zip(offsets) {
                        appended[index] = offset;
                    }
                }
                AppendOutcome::Rejected(rejection) => {
                    return Err(Error::InvalidRequest(format!(
                        "{source} refused the redriven letters: {rejection}"
                    )));
                }
            }
        }
        Ok(letters
            .into_iter()
            .zip(appended)
            .map(|(letter, appended_offset)| Redriven {
                letter,
                appended_offset,
            })
            .collect())
    }
}

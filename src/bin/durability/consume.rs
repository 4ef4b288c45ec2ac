//! `durability consume` (or `tail`): prints a topic's records, from offsets given or from a
//! consumer group's cursors, and follows new ones by long-poll until interrupted (or, with
//! `-e`, until it reached the end). With a group it commits what it printed, so the next run
//! of the group starts after it.

use std::io::Write;
use std::time::Duration;

use durability::client::Client;
use durability::wire::RecordJson;

use crate::remote::{Failure, Remote};

/// How long one long-poll waits for records while following.
const FOLLOW_WAIT: Duration = Duration::from_secs(5);

/// `durability consume`.
#[derive(clap::Args, Debug)]
pub(crate) struct Consume {
    /// The topic.
    #[arg(short, long)]
    topic: String,
    /// One partition only (default: every partition).
    #[arg(short, long)]
    partition: Option<u32>,
    /// Reads as consumer group GROUP, from its cursors, and commits what was printed.
    #[arg(short, long, conflicts_with = "offset")]
    group: Option<String>,
    /// Where to start without a group: `beginning`, `end`, an offset N, or -N (the last N).
    #[arg(short, long, default_value = "beginning", allow_hyphen_values = true)]
    offset: StartAt,
    /// Exits at the end of the topic instead of waiting for more.
    #[arg(short = 'e', long = "exit")]
    exit_at_end: bool,
    /// Exits after COUNT records.
    #[arg(short = 'n', long)]
    count: Option<u64>,
    /// `json` (a JSON object a line), or a format: %t topic, %p partition, %o offset, %k
    /// key, %s payload (its JSON, or base64 for a binary one), %T time (ms since the epoch), %%
    /// a percent sign, \n and \t.
    #[arg(short, long, default_value = "json")]
    format: String,
    #[command(flatten)]
    remote: Remote,
}

/// Where a consumer without a group starts in each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StartAt {
    Beginning,
    End,
    Offset(u64),
    /// This many records before the end.
    Last(u64),
}

impl std::str::FromStr for StartAt {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "beginning" => Ok(Self::Beginning),
            "end" => Ok(Self::End),
            _ => match text.strip_prefix('-') {
                Some(last) => last.parse().map(Self::Last),
                None => text.parse().map(Self::Offset),
            }
            .map_err(|_| format!("{text:?} is not beginning, end, N or -N")),
        }
    }
}

/// What is left to print, with `-n`.
struct Budget(Option<u64>);

impl Budget {
    fn spent(&self) -> bool {
        self.0 == Some(0)
    }

    /// Takes one record's worth; false when none is left.
    fn take(&mut self) -> bool {
        match &mut self.0 {
            Some(0) => false,
            Some(left) => {
                *left -= 1;
                true
            }
            None => true,
        }
    }
}

impl Consume {
    pub(crate) async fn run(self) -> Result<(), Failure> {
        let client = self.remote.client()?;
        let mut budget = Budget(self.count);
        match &self.group {
            Some(group) => self.as_group(&client, group, &mut budget).await,
            None => self.at_offsets(&client, &mut budget).await,
        }
    }

    /// Reads as a member of `group`, committing what was printed after each batch.
    async fn as_group(
        &self,
        client: &Client,
        group: &str,
        budget: &mut Budget,
    ) -> Result<(), Failure> {
        let wait = if self.exit_at_end {
            Duration::ZERO
        } else {
            FOLLOW_WAIT
        };
        let mut consumer = client.consumer(&self.topic, group).wait(wait);
        while !budget.spent() {
            let batch = consumer.next_batch().await?;
            let batch: Vec<_> = batch
                .into_iter()
                .filter(|delivery| self.partition.is_none_or(|p| p == delivery.partition))
                .collect();
            if batch.is_empty() && self.exit_at_end {
                return Ok(());
            }
            let mut done = Vec::with_capacity(batch.len());
            let mut lines = String::new();
            for delivery in &batch {
                if !budget.take() {
                    break;
                }
                self.render(&mut lines, delivery.partition, &delivery.record);
                done.push(delivery);
            }
            print(&lines)?;
            consumer.commit(done).await?;
        }
        Ok(())
    }

    /// Reads each partition from where `-o` says, without a group.
    async fn at_offsets(&self, client: &Client, budget: &mut Budget) -> Result<(), Failure> {
        let partitions: Vec<u32> = match self.partition {
            Some(partition) => vec![partition],
            None => {
                let described = client.describe(&self.topic).await?;
                described.partitions.iter().map(|p| p.partition).collect()
            }
        };
        let mut next = Vec::with_capacity(partitions.len());
        for &partition in &partitions {
            next.push(self.start(client, partition).await?);
        }
        // One partition waits at the server for new records; several are read in turn, with a
        // pause after a round that found none.
        let waits = partitions.len() == 1 && !self.exit_at_end;
        let wait = if waits { FOLLOW_WAIT } else { Duration::ZERO };
        while !budget.spent() {
            let mut found = false;
            let mut at_end = true;
            for (partition, from) in partitions.iter().zip(next.iter_mut()) {
                let page = client
                    .read_waiting(&self.topic, *partition, *from, None, wait)
                    .await?;
                found |= !page.records.is_empty();
                at_end &= page.lag == 0;
                let mut lines = String::new();
                let taken = page.records.iter().take_while(|_| budget.take());
                for record in taken {
                    self.render(&mut lines, *partition, record);
                }
                print(&lines)?;
                if budget.spent() {
                    return Ok(());
                }
                *from = Some(page.next_offset);
            }
            if at_end && self.exit_at_end {
                return Ok(());
            }
            if !found && !waits {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(())
    }

    /// The offset to read `partition` from first (`None`: its oldest readable).
    async fn start(&self, client: &Client, partition: u32) -> Result<Option<u64>, Failure> {
        let bounds = || client.bounds(&self.topic, partition);
        Ok(match self.offset {
            StartAt::Beginning => None,
            StartAt::Offset(offset) => Some(offset),
            StartAt::End => Some(bounds().await?.next_offset),
            StartAt::Last(count) => {
                let bounds = bounds().await?;
                Some(
                    bounds
                        .next_offset
                        .saturating_sub(count)
                        .max(bounds.oldest_offset),
                )
            }
        })
    }

    /// Adds `record` of `partition` to `lines`, as `--format` says.
    fn render(&self, lines: &mut String, partition: u32, record: &RecordJson) {
        if self.format == "json" {
            /// A record with its topic and partition, as `--format json` prints it.
            #[derive(serde::Serialize)]
            struct Line<'a> {
                topic: &'a str,
                partition: u32,
                #[serde(flatten)]
                record: &'a RecordJson,
            }
            let line = Line {
                topic: &self.topic,
                partition,
                record,
            };
            lines.push_str(&serde_json::to_string(&line).expect("a record serializes"));
            lines.push('\n');
        } else {
            lines.push_str(&formatted(&self.format, &self.topic, partition, record));
        }
    }
}

/// Writes `lines` (a page's) to standard output at once: a write per page, not per line.
fn print(lines: &str) -> Result<(), Failure> {
    if !lines.is_empty() {
        std::io::stdout().lock().write_all(lines.as_bytes())?;
    }
    Ok(())
}

/// `record` of `partition` of `topic` in `format` (see [`Consume::format`]).
fn formatted(format: &str, topic: &str, partition: u32, record: &RecordJson) -> String {
    let mut line = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('%', Some(spec)) => {
                chars.next();
                match spec {
                    '%' => line.push('%'),
                    't' => line.push_str(topic),
                    'p' => line.push_str(&partition.to_string()),
                    'o' => line.push_str(&record.offset.to_string()),
                    'k' => line.push_str(record.key.as_deref().unwrap_or("")),
                    's' => line.push_str(match (&record.payload, &record.payload_base64) {
                        (Some(json), _) => json.get(),
                        (None, Some(base64)) => base64,
                        (None, None) => "",
                    }),
                    'T' => line.push_str(&record.appended_at.to_string()),
                    other => {
                        line.push('%');
                        line.push(other);
                    }
                }
            }
            ('\\', Some('n')) => {
                chars.next();
                line.push('\n');
            }
            ('\\', Some('t')) => {
                chars.next();
                line.push('\t');
            }
            _ => line.push(c),
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `-o` form is read as what it says, and anything else is refused.
    #[test]
    fn start_offsets_parse() {
        assert_eq!("beginning".parse(), Ok(StartAt::Beginning));
        assert_eq!("end".parse(), Ok(StartAt::End));
        assert_eq!("42".parse(), Ok(StartAt::Offset(42)));
        assert_eq!("-10".parse(), Ok(StartAt::Last(10)));
        assert!("soon".parse::<StartAt>().is_err());
        assert!("-x".parse::<StartAt>().is_err());
    }

    /// A format names each part of a record; escapes and unknown specifiers are kept.
    #[test]
    fn formats_name_each_part() {
        let record = RecordJson {
            offset: 7,
            key: Some("k1".into()),
            payload: Some(serde_json::value::to_raw_value(&serde_json::json!({"a": 1})).unwrap()),
            payload_base64: None,
            tombstone: false,
            message_key: None,
            message_key_base64: None,
            headers: None,
            appended_at: 1_800_000_000_000,
        };
        assert_eq!(
            formatted("%t/%p@%o %k %s %T%%q\\n", "orders", 3, &record),
            "orders/3@7 k1 {\"a\":1} 1800000000000%q\n"
        );
    }
}

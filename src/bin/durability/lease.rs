//! `durability lease`: one lease operation per run, for scripts and for looking into a group by
//! hand: claim a range of the group's records, then ack, nack or extend it by its batch id.
//! Each answer is one JSON line on standard output, so that
//! `BATCH=$(durability lease -t t -g g claim -p 0 | jq -r .batchId)` works.

use std::io::Write;
use std::time::Duration;

use durability::wire::PartitionLease;
use serde::Serialize;

use crate::remote::{Failure, Remote};

/// `durability lease`. The topic, group and connection flags go before the action.
#[derive(clap::Args, Debug)]
pub(crate) struct Lease {
    /// The topic.
    #[arg(short, long)]
    topic: String,
    /// The consumer group.
    #[arg(short, long)]
    group: String,
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    remote: Remote,
}

/// What `durability lease` does.
#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Claims the group's next range and prints it: {"batchId", "partition", "group",
    /// "firstOffset", "lastOffset", "attempt", "expiresAt", "records"}. Prints nothing (exit 0)
    /// when nothing is available now.
    Claim {
        /// Of this partition (default: of whichever partition has a range available).
        #[arg(short, long)]
        partition: Option<u32>,
        /// Most records in the range (default and cap: the server's log.max_batch_size).
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Settles the range; prints the group's cursor after it: {"cursor"} (null: none yet).
    Ack(Batch),
    /// Gives the range back, to be delivered again under a new batch id. Prints nothing: the
    /// server answers with no body.
    Nack {
        #[command(flatten)]
        batch: Batch,
        /// Delivers it again no sooner than this many ms from now.
        #[arg(long, default_value_t = 0, value_name = "MS")]
        delay_ms: u64,
    },
    /// Holds the range for another leases.lease_ms; prints when the hold ends: {"expiresAt"}.
    Extend(Batch),
}

/// The leased range an ack, nack or extend is about.
#[derive(clap::Args, Debug)]
struct Batch {
    /// The range's partition.
    #[arg(short, long)]
    partition: u32,
    /// The batch id its claim printed.
    batch_id: String,
}

impl Lease {
    pub(crate) async fn run(self) -> Result<(), Failure> {
        let client = self.remote.client()?;
        let (topic, group) = (self.topic.as_str(), self.group.as_str());
        match self.action {
            Action::Claim { partition, limit } => {
                // A claim of one partition answers a lease without its partition: it is added,
                // so that both claims print the same shape.
                let claimed = match partition {
                    Some(partition) => client
                        .claim(topic, partition, group, limit)
                        .await?
                        .map(|lease| PartitionLease { lease, partition }),
                    None => client.claim_any(topic, group, limit).await?,
                };
                match claimed {
                    Some(lease) => print(&lease),
                    None => {
                        let _ = writeln!(
                            std::io::stderr(),
                            "nothing to claim now: every record is leased or settled, the group \
                             holds leases.max_parallelism ranges, or a range went to the \
                             dead-letter topic (claim again)"
                        );
                        Ok(())
                    }
                }
            }
            Action::Ack(batch) => print(
                &client
                    .ack(topic, batch.partition, group, &batch.batch_id)
                    .await?,
            ),
            Action::Nack { batch, delay_ms } => {
                let delay = Duration::from_millis(delay_ms);
                let nacked = client.nack(topic, batch.partition, group, &batch.batch_id, delay);
                Ok(nacked.await?)
            }
            Action::Extend(batch) => print(
                &client
                    .extend(topic, batch.partition, group, &batch.batch_id)
                    .await?,
            ),
        }
    }
}

/// Prints `answer` as one JSON line.
fn print(answer: &impl Serialize) -> Result<(), Failure> {
    let line = serde_json::to_string(answer).expect("the answers serialize");
    writeln!(std::io::stdout().lock(), "{line}")?;
    Ok(())
}

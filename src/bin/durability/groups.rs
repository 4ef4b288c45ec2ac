//! `durability groups`: a topic's consumer groups with each one's cursor and lag per partition
//! (from `GET /topics/{topic}`), and `--reset-to`, which moves one group's cursors.
//!
//! A cursor PUT is a commit, and commits only move forward: an offset at or below the cursor
//! changes nothing (`put_cursor` in `src/http/consume.rs`). Moving a cursor back therefore
//! deletes it first (`DELETE .../cursors/{group}`, which also drops the group's leases on that
//! partition) and then puts the new one. The two calls are not one transaction: a member of
//! the group that reads in between starts from the oldest offset. Reset a stopped group.

use std::collections::BTreeSet;
use std::io::{BufRead, IsTerminal, Write};

use durability::client::Client;
use durability::wire::{PartitionDetail, TopicDetail};
use serde::Serialize;

use crate::remote::{Failure, Output, Remote};

/// `durability groups`.
#[derive(clap::Args, Debug)]
pub(crate) struct Groups {
    /// The topic.
    #[arg(short, long)]
    topic: String,
    /// One group only (default: every group with a cursor).
    group: Option<String>,
    /// One partition only (default: every partition).
    #[arg(short, long)]
    partition: Option<u32>,
    /// Moves GROUP's cursors to `earliest` (each partition's oldest readable offset), `latest`
    /// (its next offset: skips what is there) or an offset. Prints each move and asks before
    /// doing it. Moving back also drops the group's leases on that partition.
    #[arg(long, value_name = "WHERE", requires = "group")]
    reset_to: Option<ResetTo>,
    /// Moves without asking (required when standard input is not a terminal).
    #[arg(short, long, requires = "reset_to")]
    yes: bool,
    #[command(flatten)]
    remote: Remote,
}

/// Where `--reset-to` moves a cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResetTo {
    Earliest,
    Latest,
    Offset(u64),
}

impl std::str::FromStr for ResetTo {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "earliest" => Ok(Self::Earliest),
            "latest" => Ok(Self::Latest),
            _ => text
                .parse()
                .map(Self::Offset)
                .map_err(|_| format!("{text:?} is not earliest, latest or an offset")),
        }
    }
}

/// A group's place in one partition: a row of the listing.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct Position {
    group: String,
    partition: u32,
    /// `None`: the group never committed here, and reads from the oldest offset.
    cursor: Option<u64>,
    next_offset: u64,
    /// Records the group has still to read.
    lag: u64,
}

/// What `groups --output json` prints.
#[derive(Serialize)]
struct Listing<'a> {
    topic: &'a str,
    positions: Vec<Position>,
}

/// What `groups --reset-to --output json` prints before moving.
#[derive(Serialize)]
struct Plan<'a> {
    group: &'a str,
    moves: &'a [Move],
}

/// One cursor that `--reset-to` moves.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct Move {
    partition: u32,
    /// `None`: no cursor yet.
    from: Option<u64>,
    to: u64,
}

impl Groups {
    pub(crate) async fn run(self) -> Result<(), Failure> {
        let client = self.remote.client()?;
        let described = client.describe(&self.topic).await?;
        let partitions = self.partitions(&described)?;
        match (&self.group, self.reset_to) {
            (Some(group), Some(reset_to)) => {
                let moves = plan(&partitions, group, reset_to).map_err(Failure::usage)?;
                self.reset(&client, group, &moves).await
            }
            _ => self.list(&partitions),
        }
    }

    /// The partitions `-p` selects.
    fn partitions<'a>(
        &self,
        described: &'a TopicDetail,
    ) -> Result<Vec<&'a PartitionDetail>, Failure> {
        let selected: Vec<_> = described
            .partitions
            .iter()
            .filter(|detail| self.partition.is_none_or(|p| p == detail.partition))
            .collect();
        match self.partition {
            Some(partition) if selected.is_empty() => Err(Failure::usage(format!(
                "topic {} has no partition {partition} (it has {})",
                self.topic,
                described.partitions.len()
            ))),
            _ => Ok(selected),
        }
    }

    /// Prints each group's position in each partition.
    fn list(&self, partitions: &[&PartitionDetail]) -> Result<(), Failure> {
        let groups: BTreeSet<&str> = match &self.group {
            Some(group) => BTreeSet::from([group.as_str()]),
            None => partitions
                .iter()
                .flat_map(|detail| detail.cursors.keys().map(String::as_str))
                .collect(),
        };
        let positions = groups
            .into_iter()
            .flat_map(|group| partitions.iter().map(move |detail| position(detail, group)));
        let mut out = std::io::stdout().lock();
        if self.remote.output == Output::Json {
            let listing = Listing {
                topic: &self.topic,
                positions: positions.collect(),
            };
            writeln!(out, "{}", serde_json::to_string(&listing).expect("JSON"))?;
            return Ok(());
        }
        writeln!(
            out,
            "{:<30} {:>9} {:>12} {:>12} {:>12}",
            "GROUP", "PARTITION", "CURSOR", "NEXT", "LAG"
        )?;
        for row in positions {
            writeln!(
                out,
                "{:<30} {:>9} {:>12} {:>12} {:>12}",
                row.group,
                row.partition,
                shown(row.cursor),
                row.next_offset,
                row.lag
            )?;
        }
        Ok(())
    }

    /// Shows `moves`, asks (or checks `--yes`), then moves `group`'s cursors.
    async fn reset(&self, client: &Client, group: &str, moves: &[Move]) -> Result<(), Failure> {
        if moves.is_empty() {
            let _ = writeln!(
                std::io::stderr(),
                "nothing to move: {group} is already there"
            );
            return Ok(());
        }
        {
            let mut out = std::io::stdout().lock();
            if self.remote.output == Output::Json {
                let plan = Plan { group, moves };
                writeln!(out, "{}", serde_json::to_string(&plan).expect("JSON"))?;
            } else {
                for step in moves {
                    let (partition, from) = (step.partition, shown(step.from));
                    writeln!(out, "{group} partition {partition}: {from} → {}", step.to)?;
                }
            }
        }
        if !self.yes {
            if !std::io::stdin().is_terminal() {
                return Err(Failure::usage(
                    "standard input is not a terminal, so there is nobody to ask: add --yes to \
                     move the cursors (nothing changed)",
                ));
            }
            if !confirmed()? {
                let _ = writeln!(std::io::stderr(), "nothing changed");
                return Ok(());
            }
        }
        for step in moves {
            let partition = step.partition;
            if step.from.is_some_and(|from| step.to < from) {
                client.delete_cursor(&self.topic, partition, group).await?;
            }
            let cursor = client
                .put_cursor(&self.topic, partition, group, step.to)
                .await?;
            if cursor.cursor != step.to {
                let _ = writeln!(
                    std::io::stderr(),
                    "partition {partition}: the cursor is at {}: a member of {group} committed \
                     meanwhile",
                    cursor.cursor
                );
            }
        }
        let _ = writeln!(
            std::io::stderr(),
            "moved {} cursor(s) of {group}",
            moves.len()
        );
        Ok(())
    }
}

/// `group`'s position in the partition `detail` describes.
fn position(detail: &PartitionDetail, group: &str) -> Position {
    let cursor = detail.cursors.get(group).copied();
    let next_offset = detail.bounds.next_offset;
    Position {
        group: group.to_owned(),
        partition: detail.partition,
        cursor,
        next_offset,
        lag: next_offset.saturating_sub(cursor.unwrap_or(detail.bounds.oldest_offset)),
    }
}

/// The moves that put `group`'s cursors of `partitions` where `reset_to` says, leaving out
/// those already there (a group without a cursor reads from the oldest offset); why not, when
/// an offset is outside some partition's readable range.
fn plan(
    partitions: &[&PartitionDetail],
    group: &str,
    reset_to: ResetTo,
) -> Result<Vec<Move>, String> {
    let mut moves = Vec::new();
    for detail in partitions {
        let bounds = &detail.bounds;
        let to = match reset_to {
            ResetTo::Earliest => bounds.oldest_offset,
            ResetTo::Latest => bounds.next_offset,
            ResetTo::Offset(offset) => offset,
        };
        if !(bounds.oldest_offset..=bounds.next_offset).contains(&to) {
            return Err(format!(
                "partition {}: offset {to} is outside its readable range {}..={} (-p N moves one \
                 partition only); nothing changed",
                detail.partition, bounds.oldest_offset, bounds.next_offset
            ));
        }
        let from = detail.cursors.get(group).copied();
        if from.unwrap_or(bounds.oldest_offset) != to {
            moves.push(Move {
                partition: detail.partition,
                from,
                to,
            });
        }
    }
    Ok(moves)
}

/// Asks on the terminal whether to go on: only `y` or `yes` does.
fn confirmed() -> Result<bool, Failure> {
    let mut stderr = std::io::stderr();
    write!(stderr, "Proceed? [y/N] ")?;
    stderr.flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim().to_lowercase().as_str(), "y" | "yes"))
}

/// A cursor as the table shows it (`-`: none).
fn shown(cursor: Option<u64>) -> String {
    cursor.map_or_else(|| "-".to_owned(), |cursor| cursor.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use durability::wire::Bounds;

    use super::*;

    /// Partition `partition` holding offsets `oldest..next`, with `cursors`.
    fn detail(partition: u32, oldest: u64, next: u64, cursors: &[(&str, u64)]) -> PartitionDetail {
        PartitionDetail {
            partition,
            bounds: Bounds {
                oldest_offset: oldest,
                hot_offset: oldest,
                next_offset: next,
            },
            cursors: cursors
                .iter()
                .map(|(group, cursor)| ((*group).to_owned(), *cursor))
                .collect::<BTreeMap<_, _>>(),
            pending_deliveries: 0,
        }
    }

    /// Each `--reset-to` form is read as what it says, and anything else is refused.
    #[test]
    fn reset_targets_parse() {
        assert_eq!("earliest".parse(), Ok(ResetTo::Earliest));
        assert_eq!("latest".parse(), Ok(ResetTo::Latest));
        assert_eq!("12".parse(), Ok(ResetTo::Offset(12)));
        assert!("-1".parse::<ResetTo>().is_err());
        assert!("beginning".parse::<ResetTo>().is_err());
    }

    /// The lag counts from the cursor, or from the oldest offset for a group without one.
    #[test]
    fn lag_counts_from_the_cursor_or_the_oldest_offset() {
        let partition = detail(0, 4, 10, &[("a", 7)]);
        assert!(matches!(
            position(&partition, "a"),
            Position {
                cursor: Some(7),
                lag: 3,
                ..
            }
        ));
        assert!(matches!(
            position(&partition, "b"),
            Position {
                cursor: None,
                lag: 6,
                ..
            }
        ));
    }

    /// A reset moves each cursor that is not already there (a missing cursor is at the oldest
    /// offset), and refuses an offset outside any selected partition's range.
    #[test]
    fn a_reset_plans_only_real_moves_within_range() {
        let (first, second) = (detail(0, 2, 9, &[("g", 5)]), detail(1, 0, 3, &[]));
        let partitions = [&first, &second];
        assert_eq!(
            plan(&partitions, "g", ResetTo::Earliest),
            Ok(vec![Move {
                partition: 0,
                from: Some(5),
                to: 2
            }])
        );
        assert_eq!(
            plan(&partitions, "g", ResetTo::Latest),
            Ok(vec![
                Move {
                    partition: 0,
                    from: Some(5),
                    to: 9
                },
                Move {
                    partition: 1,
                    from: None,
                    to: 3
                },
            ])
        );
        assert!(plan(&partitions, "g", ResetTo::Offset(5)).is_err());
        assert!(plan(&[&first], "g", ResetTo::Offset(1)).is_err());
        assert_eq!(plan(&[&first], "g", ResetTo::Offset(5)), Ok(vec![]));
    }
}

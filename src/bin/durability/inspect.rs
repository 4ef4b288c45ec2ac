//! `durability topics` and `durability cluster`: what a server holds, as a table for people or
//! JSON for programs (`--output json`).

use std::io::Write;

use crate::remote::{Failure, Output, Remote};

/// `durability topics`: every topic, or one topic's partitions.
#[derive(clap::Args, Debug)]
pub(crate) struct Topics {
    /// One topic to describe: its partitions' offsets, and each group's cursor and lag.
    topic: Option<String>,
    #[command(flatten)]
    remote: Remote,
}

impl Topics {
    pub(crate) async fn run(self) -> Result<(), Failure> {
        let client = self.remote.client()?;
        let mut out = std::io::stdout().lock();
        let json = self.remote.output == Output::Json;
        let Some(topic) = &self.topic else {
            let mut after: Option<String> = None;
            loop {
                let page = client.topics(after.as_deref(), None).await?;
                if after.is_none() && !json {
                    writeln!(out, "{:<40} {:>10}", "TOPIC", "PARTITIONS")?;
                }
                for topic in &page.topics {
                    if json {
                        writeln!(out, "{}", serde_json::to_string(topic).expect("JSON"))?;
                    } else {
                        writeln!(out, "{:<40} {:>10}", topic.name, topic.partitions)?;
                    }
                }
                match page.next {
                    Some(next) => after = Some(next),
                    None => return Ok(()),
                }
            }
        };
        let described = client.describe(topic).await?;
        if json {
            writeln!(out, "{}", serde_json::to_string(&described).expect("JSON"))?;
            return Ok(());
        }
        writeln!(
            out,
            "{:>9} {:>12} {:>12} {:>12}  GROUPS (cursor, lag)",
            "PARTITION", "OLDEST", "HOT", "NEXT"
        )?;
        for partition in &described.partitions {
            let bounds = &partition.bounds;
            let groups: Vec<String> = partition
                .cursors
                .iter()
                .map(|(group, cursor)| {
                    let lag = bounds.next_offset.saturating_sub(*cursor);
                    format!("{group} ({cursor}, {lag})")
                })
                .collect();
            writeln!(
                out,
                "{:>9} {:>12} {:>12} {:>12}  {}",
                partition.partition,
                bounds.oldest_offset,
                bounds.hot_offset,
                bounds.next_offset,
                groups.join(", ")
            )?;
        }
        Ok(())
    }
}

/// `durability cluster`: the members and the volumes each owns.
#[derive(clap::Args, Debug)]
pub(crate) struct ClusterView {
    #[command(flatten)]
    remote: Remote,
}

impl ClusterView {
    pub(crate) async fn run(self) -> Result<(), Failure> {
        let client = self.remote.client()?;
        let view = client.cluster().await?;
        let mut out = std::io::stdout().lock();
        if self.remote.output == Output::Json {
            writeln!(out, "{view}")?;
            return Ok(());
        }
        writeln!(out, "{:<20} {:<40} {:>8}", "MEMBER", "URL", "VOLUMES")?;
        if let Some(members) = view["members"].as_object() {
            for (name, member) in members {
                let volumes = member["volumes"].as_array().map_or(0, Vec::len);
                let url = member["url"].as_str().unwrap_or("");
                writeln!(out, "{name:<20} {url:<40} {volumes:>8}")?;
            }
        }
        if let Some(unowned) = view["unowned"]
            .as_array()
            .filter(|unowned| !unowned.is_empty())
        {
            writeln!(out, "unowned volumes: {}", unowned.len())?;
        }
        Ok(())
    }
}

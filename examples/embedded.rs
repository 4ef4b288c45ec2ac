//! Embeds the log in your own Actix application: open a `Log`, send typed messages to a
//! partition's actor, append keyed events routed by the partitioning function, and read back.
//!
//! Run: `cargo run --example embedded`

use durability::partition::{Append, Commit, Read};
use durability::store::NewRecord;
use durability::{Config, Event, EventsOutcome, Log};

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut config = Config::default();
    config.storage.data_dir = dir.path().join("data");
    config.cold.dir = dir.path().join("cold");
    let log = Log::open(config)?;

    // Typed messages straight to one partition's actor.
    let orders = log.partition_actor("orders", 0).await?;
    let appended = orders
        .send(Append {
            records: vec![
                NewRecord::keyed("order-1", r#"{"total":42}"#),
                NewRecord::keyed("order-2", r#"{"total":7}"#),
            ],
        })
        .await??;
    println!("appended: {:?}", appended.outcome);

    // A retried key returns its original offset and writes nothing.
    let retried = orders
        .send(Append {
            records: vec![NewRecord::keyed("order-2", r#"{"total":7}"#)],
        })
        .await??;
    println!("retried:  {:?}", retried.outcome);

    let page = orders
        .send(Read {
            from: Some(0),
            limit: Some(10),
        })
        .await??;
    for record in &page.records {
        println!(
            "offset {} key {:?}: {}",
            record.offset,
            record.key,
            record.payload.as_json().unwrap_or("(not JSON)")
        );
    }
    let cursor = orders
        .send(Commit {
            group: "billing".into(),
            offset: page.next_offset,
        })
        .await??;
    println!("billing committed up to {cursor}");

    // Keyed events: each goes to the partition its partition key picks.
    let events = ["user-1", "user-2", "user-1"]
        .into_iter()
        .map(|user| Event {
            partition_key: user.into(),
            key: None,
            payload: format!(r#"{{"user":"{user}"}}"#).into(),
            headers: Vec::new(),
        })
        .collect();
    if let EventsOutcome::Appended(placed) = log.append_events("clicks", events).await? {
        println!("clicks landed at (partition, offset): {placed:?}");
    }
    log.shutdown().await?;
    Ok(())
}

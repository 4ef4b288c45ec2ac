//! Embeds one partition's log in your program: append with deduplication keys, read a page,
//! commit a consumer's position, and check the backlog.
//!
//! Run: `cargo run --example embedded`

use durability::store::{AppendOutcome, LogStore, NewRecord, StoreOptions};

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log = LogStore::open(dir.path().join("orders-0.sqlite"), StoreOptions::default())?;

    // Producers append atomically; a re-sent key returns its original offset.
    let first = log.append(&[
        NewRecord::keyed("order-1", r#"{"total":42}"#),
        NewRecord::keyed("order-2", r#"{"total":7}"#),
    ])?;
    let retry = log.append(&[NewRecord::keyed("order-2", r#"{"total":7}"#)])?;
    println!("first append: {first:?}\nretried key:  {retry:?}");
    assert_eq!(retry, AppendOutcome::Appended { offsets: vec![1] });

    // Each consumer reads from its own position and commits forward.
    let page = log.read(log.cursor("billing")?, Some(10)).await?;
    for record in &page.records {
        println!(
            "offset {} key {:?}: {}",
            record.offset, record.key, record.payload
        );
    }
    log.commit("billing", page.next_offset)?;
    println!("billing's backlog: {}", log.pending_deliveries()?);
    Ok(())
}

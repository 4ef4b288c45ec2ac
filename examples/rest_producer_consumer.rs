//! The REST API end to end, through the typed client (`durability::client`): starts the
//! server in-process on a free port, produces keyed events, polls them as a consumer group,
//! commits, and polls again (nothing new).
//!
//! Run: `cargo run --example rest_producer_consumer`

use std::time::Duration;

use actix_web::{App, HttpServer};
use durability::client::{Client, Event};
use durability::{Config, Log, http};
use serde_json::json;

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut config = Config::default();
    config.storage.data_dir = dir.path().join("data");
    config.cold.dir = dir.path().join("cold");
    let log = Log::open(config)?;
    let served = log.clone();
    let server = HttpServer::new(move || App::new().configure(http::service(served.clone())))
        .workers(1)
        .bind("127.0.0.1:0")?;
    let address = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    println!("listening on http://{address}");

    // The typed client (feature `client`): it retries what is safe to retry, and gives every
    // record a deduplication key so that a retry never appends twice.
    let client = Client::builder([format!("http://{address}")]).build()?;
    let events = [
        Event::new("user-1", json!({"clicked": "home"})),
        Event::new("user-2", json!({"clicked": "cart"})),
        Event::new("user-1", json!({"clicked": "checkout"})),
    ];
    let produced = client.produce("clicks", events).await?;
    println!("produced: {:?}", produced.records);

    let mut analytics = client
        .consumer("clicks", "analytics")
        .wait(Duration::from_millis(100));
    let batch = analytics.next_batch().await?;
    for delivery in &batch {
        println!(
            "partition {} offset {}: {}",
            delivery.partition,
            delivery.record.offset,
            delivery.record.json().unwrap_or("(not JSON)")
        );
    }
    let committed = analytics.commit(&batch).await?;
    println!("committed: {:?}", committed.cursors);

    let again = analytics.next_batch().await?;
    println!("records after the commit: {}", again.len());
    assert!(again.is_empty());

    // Topics come a page at a time: pass `next` as `after` until it is none.
    let topics = client.topics(None, Some(100)).await?;
    println!("topics: {:?}", topics.topics);
    assert_eq!(topics.topics[0].name, "clicks");
    assert!(topics.next.is_none());

    handle.stop(true).await;
    log.shutdown().await?;
    Ok(())
}

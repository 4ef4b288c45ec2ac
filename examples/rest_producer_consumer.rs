//! The REST API end to end: starts the server in-process on a free port, produces keyed
//! events, polls them as a consumer group, commits, and polls again (nothing new).
//!
//! Run: `cargo run --example rest_producer_consumer`

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use actix_web::{App, HttpServer};
use durability::{Config, Log, http};
use serde_json::{Value, json};

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

    let events = json!([
        {"partitionKey": "user-1", "payload": {"clicked": "home"}, "key": "evt-1"},
        {"partitionKey": "user-2", "payload": {"clicked": "cart"}, "key": "evt-2"},
        {"partitionKey": "user-1", "payload": {"clicked": "checkout"}, "key": "evt-3"},
    ]);
    let produced = call(address, "POST", "/topics/clicks/records", Some(events)).await?;
    println!("produced: {produced}");

    let polled = call(
        address,
        "GET",
        "/topics/clicks/groups/analytics/poll?limit=10",
        None,
    )
    .await?;
    let mut offsets = serde_json::Map::new();
    for partition in polled["partitions"].as_array().into_iter().flatten() {
        for record in partition["records"].as_array().into_iter().flatten() {
            println!(
                "partition {} offset {}: {}",
                partition["partition"], record["offset"], record["payload"]
            );
        }
        if !partition["records"].as_array().is_some_and(Vec::is_empty) {
            offsets.insert(
                partition["partition"].to_string(),
                partition["nextOffset"].clone(),
            );
        }
    }
    let committed = call(
        address,
        "POST",
        "/topics/clicks/groups/analytics/commit",
        Some(json!({ "offsets": offsets })),
    )
    .await?;
    println!("committed: {committed}");

    let again = call(address, "GET", "/topics/clicks/groups/analytics/poll", None).await?;
    let new_records: usize = again["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["records"].as_array().map_or(0, Vec::len))
        .sum();
    println!("records after the commit: {new_records}");
    assert_eq!(new_records, 0);

    // Topics come a page at a time: pass `next` as `after` until it is null.
    let topics = call(address, "GET", "/topics?limit=100", None).await?;
    println!("topics: {topics}");
    assert_eq!(topics["topics"][0]["name"], "clicks");
    assert!(topics["next"].is_null());

    handle.stop(true).await;
    log.shutdown().await?;
    Ok(())
}

/// One HTTP/1.1 request with a JSON body; returns the JSON answer (or `null` for no body).
async fn call(
    address: SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> std::io::Result<Value> {
    let request = match &body {
        Some(body) => {
            let body = body.to_string();
            format!(
                "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        }
        None => format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
    };
    let response = actix_web::rt::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(address)?;
        stream.write_all(request.as_bytes())?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok::<_, std::io::Error>(response)
    })
    .await
    .map_err(std::io::Error::other)??;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok(serde_json::from_str(body).unwrap_or(Value::Null))
}

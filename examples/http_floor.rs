//! The floor of one HTTP request: actix-web, set up as the server is (same features, one
//! worker per core), answering `POST /topics/{topic}/partitions/{partition}/records` by parsing
//! the records as the server does (`payload` kept as raw JSON, optional `key`) and answering
//! their offsets, without storing anything. `scripts/bench` measures its CPU per request next
//! to the server's.
//!
//! Run: `cargo run --release --example http_floor -- 127.0.0.1:8090`

use actix_web::{App, HttpResponse, HttpServer, web};
use serde::Deserialize;
use serde_json::value::RawValue;

/// A record as the server's producers send it.
#[derive(Deserialize)]
struct Record {
    #[allow(dead_code)]
    payload: Box<RawValue>,
    #[allow(dead_code)]
    key: Option<String>,
}

async fn append(records: web::Json<Vec<Record>>) -> HttpResponse {
    let offsets: Vec<usize> = (0..records.len()).collect();
    HttpResponse::Accepted().json(serde_json::json!({ "offsets": offsets }))
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let bind = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8090".to_owned());
    let server = HttpServer::new(|| {
        App::new()
            .app_data(web::JsonConfig::default().limit(16 * 1024 * 1024))
            .route(
                "/topics/{topic}/partitions/{partition}/records",
                web::post().to(append),
            )
    })
    .bind(&bind)?;
    for address in server.addrs() {
        println!("listening on http://{address}");
    }
    server.run().await
}

//! Embeds one node of a cluster in your own Actix application: the log's REST routes beside
//! your own, and a decision of yours when the node must stop serving.
//!
//! A node stops serving for good when another node may have taken its volumes (its stream was
//! sealed, its writes could not land in the bucket for its lease's TTL, ...): its partitions
//! close, requests go to their new owners, and `Log::stopped` says why. The library never ends
//! your process; here the application counts the stop, reports it on a route of its own, and
//! opens the log again as a new incarnation of the node, which joins the cluster again (the
//! test `embedded_cluster` does the same).
//!
//! Run it with the cluster's settings in the environment, as the server takes them (the bucket
//! in `DURABILITY__COLD__*`, `DURABILITY__REPLICATION__KIND=s3` and `__NODE_ID`, and
//! `DURABILITY__CLUSTER__ETCD_ENDPOINTS` and `__ADVERTISE_URL`, matching
//! `DURABILITY__SERVER__BIND`):
//! `cargo run --example cluster_node`

use std::sync::{Arc, Mutex};

use actix_web::{App, HttpResponse, HttpServer, web};
use durability::{Config, Log, http};

/// What the application's own route reports: how many times its node stopped, and the last
/// reason.
#[derive(Default)]
struct NodeState {
    stops: u32,
    last_stop: Option<String>,
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let config = Config::load(None)?;
    let state = Arc::new(Mutex::new(NodeState::default()));
    loop {
        let log = Log::open(config.clone())?;
        let (routes, shown) = (log.clone(), state.clone());
        let server = HttpServer::new(move || {
            let shown = shown.clone();
            App::new()
                .route(
                    "/app/node",
                    web::get().to(move || {
                        let state = shown.lock().unwrap_or_else(|err| err.into_inner());
                        let body = serde_json::json!({
                            "stops": state.stops,
                            "lastStop": state.last_stop,
                        });
                        async move { HttpResponse::Ok().json(body) }
                    }),
                )
                .configure(http::service(routes.clone()))
        })
        .bind(&config.server.bind)?
        .run();
        let handle = server.handle();
        let serving = actix_web::rt::spawn(server);
        println!("serving on {}", config.server.bind);

        // Outside a cluster this never resolves, and the server runs until it is stopped.
        let reason = log.stopped().await;
        eprintln!("this node stopped serving: {reason}; joining again as a new incarnation");
        {
            let mut state = state.lock().unwrap_or_else(|err| err.into_inner());
            state.stops += 1;
            state.last_stop = Some(reason.to_string());
        }
        // Its volumes are closed already; the listener is opened again by the next round.
        handle.stop(true).await;
        let _ = serving.await;
        drop(log);
    }
}

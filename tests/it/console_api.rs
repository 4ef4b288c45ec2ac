//! The API the console needs besides the rest: a topic's groups with their lag history
//! (`GET /topics/{topic}/groups`), the redrive of dead letters
//! (`POST /topics/{topic}/partitions/{partition}/redrive`), and the console's own files
//! (`/console`), over real sockets.

use std::time::Duration;

use serde_json::{Value, json};

use durability::clock::Clock;

use crate::common::{TestServer, eventually, process};

/// A server sampling the lag every 50 ms, with leases sending ranges past one attempt to the
/// topic `dead-letters`, and `tune` besides.
fn server(tune: impl FnOnce(&mut durability::Config)) -> TestServer {
    TestServer::start(|config| {
        config.metrics.lag_sample_ms = 50;
        config.leases.enabled = true;
        config.leases.max_attempts = 1;
        config.leases.dead_letter_topic = "dead-letters".into();
        tune(config);
    })
}

async fn produce(server: &TestServer, topic: &str, payloads: &[Value]) -> Vec<u64> {
    let body: Vec<Value> = payloads.iter().map(|p| json!({ "payload": p })).collect();
    let (status, answer) = server
        .post(
            &format!("/topics/{topic}/partitions/0/records"),
            json!(body),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    answer["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|offset| offset.as_u64().unwrap())
        .collect()
}

/// `group`'s entry for partition 0 in `GET /topics/{topic}/groups`, if it has one.
async fn partition_zero(server: &TestServer, topic: &str, group: &str) -> Option<Value> {
    let (status, answer) = server.get(&format!("/topics/{topic}/groups")).await;
    assert_eq!(status, 200, "{answer}");
    let groups = answer["groups"].as_array().unwrap();
    let group = groups.iter().find(|entry| entry["group"] == group)?;
    group["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["partition"] == 0)
        .cloned()
}

fn lags(entry: &Value) -> Vec<u64> {
    entry["history"]["lags"]
        .as_array()
        .map(|lags| lags.iter().map(|lag| lag.as_u64().unwrap()).collect())
        .unwrap_or_default()
}

/// A group that commits twice shows its cursor, lag and the partition's next offset now, and
/// both lags in its history, oldest first; a group that only leases shows no cursor, its
/// lease counts and the lag from its first leased offset.
#[actix::test]
async fn a_topic_s_groups_show_cursor_lag_and_the_lag_over_time() {
    let server = server(|_| {});
    produce(&server, "orders", &vec![json!(1); 10]).await;
    let (status, _) = server
        .put(
            "/topics/orders/partitions/0/cursors/billing",
            json!({"offset": 3}),
        )
        .await;
    assert_eq!(status, 200);
    let sampled_seven = eventually(Duration::from_secs(10), async || {
        partition_zero(&server, "orders", "billing")
            .await
            .is_some_and(|entry| lags(&entry).ends_with(&[7]))
    })
    .await;
    assert!(sampled_seven, "a sample of lag 7");
    server
        .put(
            "/topics/orders/partitions/0/cursors/billing",
            json!({"offset": 8}),
        )
        .await;
    let sampled_both = eventually(Duration::from_secs(10), async || {
        partition_zero(&server, "orders", "billing")
            .await
            .is_some_and(|entry| {
                let lags = lags(&entry);
                lags.ends_with(&[2]) && lags.contains(&7) && lags.iter().rev().is_sorted()
            })
    })
    .await;
    assert!(sampled_both, "7, then 2, oldest first");
    let entry = partition_zero(&server, "orders", "billing").await.unwrap();
    assert_eq!(entry["cursor"], 8);
    assert_eq!(entry["nextOffset"], 10);
    assert_eq!(entry["lag"], 2);
    assert!(entry.get("leases").is_none(), "{entry}");
    let until = entry["history"]["until"].as_i64().unwrap();
    let now = durability::clock::SystemClock.now_ms();
    assert!((now - 10_000..=now).contains(&until), "{until} near {now}");

    let (status, _) = server
        .post(
            "/topics/orders/partitions/0/groups/workers/leases?limit=4",
            json!(null),
        )
        .await;
    assert_eq!(status, 200);
    let (_, answer) = server.get("/topics/orders/groups").await;
    assert_eq!(answer["topic"], "orders");
    assert_eq!(answer["deadLetterTopic"], "dead-letters");
    assert_eq!(answer["sampleIntervalMs"], 50);
    let names: Vec<&str> = answer["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|group| group["group"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["billing", "workers"]);
    let workers = partition_zero(&server, "orders", "workers").await.unwrap();
    assert_eq!(workers["cursor"], Value::Null);
    assert_eq!(workers["lag"], 10);
    assert_eq!(workers["leases"]["active"], 1);
    server.stop().await;
}

/// The history is bounded like the metric series: with `metrics.max_topics` 1, the second
/// topic's groups have no history, and the first keeps its own.
#[actix::test]
async fn groups_of_topics_past_the_bound_have_no_history() {
    let server = server(|config| config.metrics.max_topics = 1);
    produce(&server, "first", &vec![json!(1); 2]).await;
    server
        .put("/topics/first/partitions/0/cursors/g", json!({"offset": 1}))
        .await;
    let tracked = eventually(Duration::from_secs(10), async || {
        partition_zero(&server, "first", "g")
            .await
            .is_some_and(|entry| !lags(&entry).is_empty())
    })
    .await;
    assert!(tracked, "the first topic has a history");
    produce(&server, "second", &vec![json!(1); 2]).await;
    server
        .put(
            "/topics/second/partitions/0/cursors/g",
            json!({"offset": 1}),
        )
        .await;
    // Ten samples' time: the second topic's group was seen by several.
    actix_web::rt::time::sleep(Duration::from_millis(500)).await;
    let second = partition_zero(&server, "second", "g").await.unwrap();
    assert!(second.get("history").is_none(), "{second}");
    assert_eq!(second["lag"], 1);
    let first = partition_zero(&server, "first", "g").await.unwrap();
    assert!(lags(&first).len() >= 5, "{first}");
    let (_, metrics) = server.get("/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default().to_owned();
    assert!(
        metrics.contains("durability_lag_history_groups 1\n"),
        "{metrics}"
    );
    server.stop().await;
}

/// Sends the one record of `jobs` to the dead letters (a lease nacked past its one attempt,
/// then claimed again): the letter's partition and offset in `dead-letters`.
async fn one_letter(server: &TestServer, payload: Value) -> (u32, u64) {
    produce(server, "jobs", &[payload]).await;
    let claim = "/topics/jobs/partitions/0/groups/workers/leases?limit=1";
    let (status, lease) = server.post(claim, json!(null)).await;
    assert_eq!(status, 200, "{lease}");
    let nack = format!(
        "/topics/jobs/partitions/0/groups/workers/leases/{}/nack",
        lease["batchId"].as_str().unwrap()
    );
    assert_eq!(server.post(&nack, json!({})).await.0, 204);
    assert_eq!(server.post(claim, json!(null)).await.0, 204, "sent away");
    let partition = durability::routing::partition_for("jobs:0:0", 8);
    let (_, page) = server
        .get(&format!(
            "/topics/dead-letters/partitions/{partition}/records"
        ))
        .await;
    let letter = &page["records"][0];
    assert_eq!(letter["key"], "jobs:0:0", "{page}");
    (partition, letter["offset"].as_u64().unwrap())
}

/// A redrive appends the letter's payload back to its source partition; redriving it again
/// (a double click, a retried request) answers the same offset and appends nothing.
#[actix::test]
async fn a_letter_redriven_twice_is_back_in_its_source_once() {
    let server = server(|_| {});
    let (partition, offset) = one_letter(&server, json!({"order": 7})).await;
    let redrive = format!("/topics/dead-letters/partitions/{partition}/redrive");
    let (status, first) = server.post(&redrive, json!({"offsets": [offset]})).await;
    assert_eq!(status, 200, "{first}");
    let expected = json!({"redriven": [{
        "offset": offset, "topic": "jobs", "partition": 0, "sourceOffset": 0, "appendedOffset": 1,
    }]});
    assert_eq!(first, expected);
    let (status, second) = server.post(&redrive, json!({"offsets": [offset]})).await;
    assert_eq!(status, 200);
    assert_eq!(second, expected, "the same offset, nothing appended");
    let (status, twice) = server
        .post(&redrive, json!({"offsets": [offset, offset]}))
        .await;
    assert_eq!(status, 200);
    let entry = &expected["redriven"][0];
    assert_eq!(
        twice,
        json!({"redriven": [entry, entry]}),
        "asked twice: once"
    );

    let (_, page) = server.get("/topics/jobs/partitions/0/records").await;
    let payloads: Vec<&Value> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| &record["payload"])
        .collect();
    assert_eq!(payloads, [&json!({"order": 7}), &json!({"order": 7})]);
    assert_eq!(
        page["records"][1]["key"],
        format!("redrive:dead-letters:{partition}:{offset}")
    );
    server.stop().await;
}

/// A caller that may consume the dead letters but not produce to a letter's source is refused
/// (`403`), and nothing is appended.
#[actix::test]
async fn a_redrive_needs_the_right_to_produce_to_the_source() {
    let reader = "reader-token";
    let mut server = server(|config| {
        config.server.auth_token = "admin-token".into();
        config.auth.tokens = vec![durability::config::TokenSettings {
            name: "reader".into(),
            sha256: hex::encode(durability::auth::token_hash(reader)),
            grants: vec!["dead-letters:consume".into()],
        }];
    });
    server.token = Some("admin-token".into());
    let (partition, offset) = one_letter(&server, json!("x")).await;
    let redrive = format!("/topics/dead-letters/partitions/{partition}/redrive");
    let body = json!({"offsets": [offset]}).to_string();
    let (status, refusal) = server
        .send("POST", &redrive, Some(&body), Some(reader))
        .await;
    assert_eq!(status, 403, "{refusal}");
    assert_eq!(refusal["error"]["code"], "forbidden");
    let (_, bounds) = server.get("/topics/jobs/partitions/0/bounds").await;
    assert_eq!(bounds["nextOffset"], 1, "nothing appended");
    server.stop().await;
}

/// `/console` is served without a token even where the API needs one, from the binary, under
/// a policy that runs only its own files; `/console` redirects to `/console/`.
#[actix::test]
async fn the_console_is_served_from_the_binary_without_a_token() {
    let server = server(|config| config.server.auth_token = "s3cret".into());
    let addr = server.addr;
    // On the blocking pool: the server runs on this test's thread.
    let get = async |path: &str| {
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let exchange = move || process::exchange(addr, &request).unwrap();
        actix_web::rt::task::spawn_blocking(exchange).await.unwrap()
    };
    let (status, head, _) = get("/console").await;
    assert_eq!(status, 308);
    assert!(
        head.to_ascii_lowercase().contains("location: /console/"),
        "{head}"
    );
    let (status, head, page) = get("/console/").await;
    assert_eq!(status, 200);
    let head = head.to_ascii_lowercase();
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(
        head.contains("content-security-policy: default-src 'self'"),
        "{head}"
    );
    let page = String::from_utf8(page).unwrap();
    assert!(page.contains("console.js") && page.contains("console.css"));
    for (file, kind) in [
        ("console.js", "text/javascript"),
        ("console.css", "text/css"),
    ] {
        let (status, head, body) = get(&format!("/console/{file}")).await;
        assert_eq!(status, 200, "{file}");
        assert!(head.to_ascii_lowercase().contains(kind), "{head}");
        assert!(!body.is_empty());
    }
    assert_eq!(get("/console/secrets.txt").await.0, 404);
    assert_eq!(server.send("GET", "/topics", None, None).await.0, 401);
    server.stop().await;
}

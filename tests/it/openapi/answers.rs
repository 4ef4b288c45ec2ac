//! Real answers of every route, successes and errors, checked against the document's statuses
//! and schemas.

use actix_web::http::header::{CONTENT_TYPE, ContentType};
use actix_web::{App, test};
use serde_json::{Value, json};

use super::{Document, assert_documented, request, send};
use crate::common::TestLog;

/// Real answers of every route, successes and errors, match the document's statuses and
/// schemas (`/metrics`: its content type); a route of the document that this test does not
/// send a request to fails it.
#[actix::test]
async fn answers_match_the_document() {
    let log = TestLog::with(|config| config.log.partitions_per_topic = 2);
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    let (_, document) = send(
        &app,
        request("get", "/openapi.json", None, None).to_request(),
    )
    .await;
    let document = &Document::new(document);

    exchange!(&app, document, "get", "/healthz", "/healthz");
    exchange!(&app, document, "get", "/openapi.json", "/openapi.json");
    exchange!(&app, document, "get", "/cluster", "/cluster");
    let metrics =
        test::call_service(&app, request("get", "/metrics", None, None).to_request()).await;
    let status = metrics.status().as_u16();
    let content_type = metrics.headers().get(CONTENT_TYPE).cloned();
    let text = test::read_body(metrics).await;
    let response = document.response("get", "/metrics", status, &Value::Null);
    let documented = response["content"].as_object().expect("content");
    let documented = documented.keys().next().expect("a content type");
    let content_type = content_type.expect("a content type");
    let content_type = content_type.to_str().expect("an ASCII content type");
    // The server may add parameters (a charset); the document's must all be there.
    let parameters = |value: &str| -> Vec<String> {
        value
            .split(';')
            .map(|part| part.trim().to_ascii_lowercase())
            .collect()
    };
    let answered = parameters(content_type);
    assert!(
        parameters(documented)
            .iter()
            .all(|part| answered.contains(part)),
        "GET /metrics answered {content_type}, the document says {documented}"
    );
    assert!(
        std::str::from_utf8(&text).is_ok_and(|text| text.contains("# TYPE ")),
        "GET /metrics: not the Prometheus text format"
    );

    // Produce.
    let events = json!([
        {"partitionKey": "a", "payload": {"n": 1}, "key": "k1"},
        {"partitionKey": "b", "payload": [1, "two"]},
    ]);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/records",
        "/topics/t/records",
        events
    );
    assert_eq!(status, 202);
    let records = json!([{"payload": "x"}, {"payload": null, "key": "k2"}, {"payload": 3.5}]);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records",
        records
    );
    assert_eq!(status, 202);

    // Read and consume.
    let (status, page) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records?from=0&limit=10&waitMs=0"
    );
    assert_eq!(status, 200);
    assert!(
        page["records"]
            .as_array()
            .is_some_and(|records| records.len() >= 3),
        "{page}"
    );
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/groups/{group}/poll",
        "/topics/t/groups/g/poll?limit=10"
    );
    assert_eq!(status, 200);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/groups/{group}/commit",
        "/topics/t/groups/g/commit",
        json!({"offsets": {"0": 1}})
    );
    assert_eq!(status, 200);
    let (status, _) = exchange!(
        &app,
        document,
        "put",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g",
        json!({"offset": 2})
    );
    assert_eq!(status, 200);
    let (status, cursors) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/cursors",
        "/topics/t/partitions/0/cursors"
    );
    assert_eq!((status, &cursors["cursors"]["g"]), (200, &json!(2)));
    let (status, cursor) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g"
    );
    assert_eq!((status, cursor), (200, json!({"cursor": 2})));
    let (status, _) = exchange!(
        &app,
        document,
        "put",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g",
        json!({"offset": 1, "seek": true, "metadata": "m"})
    );
    assert_eq!(status, 200);
    let (status, cursor) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g"
    );
    assert_eq!(
        (status, cursor),
        (200, json!({"cursor": 1, "metadata": "m"}))
    );
    let (status, groups) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/groups",
        "/topics/t/groups"
    );
    assert_eq!((status, &groups["groups"][0]["group"]), (200, &json!("g")));
    let (status, _) = exchange!(
        &app,
        document,
        "delete",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g"
    );
    assert_eq!(status, 204);
    let (status, cursor) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g"
    );
    assert_eq!((status, cursor), (200, json!({"cursor": null})));

    // Leases.
    let (status, lease) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "/topics/t/partitions/0/groups/w/leases?limit=1"
    );
    assert_eq!(status, 200);
    let batch = lease["batchId"].as_str().expect("a batchId").to_owned();
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "/topics/t/partitions/0/groups/w/leases?limit=1"
    );
    assert_eq!(status, 204, "max_parallelism 1: nothing more now");
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "/topics/t/partitions/0/groups/w/leases"
    );
    assert_eq!(status, 200);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/extend",
        format!("/topics/t/partitions/0/groups/w/leases/{batch}/extend")
    );
    assert_eq!(status, 200);
    let (status, acked) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/ack",
        format!("/topics/t/partitions/0/groups/w/leases/{batch}/ack")
    );
    assert_eq!((status, &acked["cursor"]), (200, &json!(1)));
    let (status, error) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/ack",
        format!("/topics/t/partitions/0/groups/w/leases/{batch}/ack")
    );
    assert_eq!(
        (status, &error["error"]["code"]),
        (409, &json!("lease_not_held"))
    );
    let (status, lease) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/groups/{group}/leases",
        "/topics/t/groups/v/leases?limit=1"
    );
    assert_eq!(status, 200);
    let nack = format!(
        "/topics/t/partitions/{}/groups/v/leases/{}/nack",
        lease["partition"],
        lease["batchId"].as_str().expect("a batchId")
    );
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack",
        nack,
        json!({"delayMs": 0})
    );
    assert_eq!(status, 204);

    // Operations.
    for (template, uri) in [
        (
            "/topics/{topic}/partitions/{partition}/bounds",
            "/topics/t/partitions/0/bounds",
        ),
        (
            "/topics/{topic}/partitions/{partition}/load",
            "/topics/t/partitions/0/load",
        ),
    ] {
        let (status, body) = send(&app, request("get", uri, None, None).to_request()).await;
        assert_documented(document, "get", template, status, &body);
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/trim",
        "/topics/t/partitions/0/trim"
    );
    assert_eq!(status, 200);
    exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/cold/forget",
        "/topics/t/partitions/0/cold/forget",
        json!({"before": 0})
    );
    let (status, _) = exchange!(&app, document, "get", "/topics", "/topics");
    assert_eq!(status, 200);
    let (status, topic) = exchange!(&app, document, "get", "/topics/{topic}", "/topics/t");
    assert_eq!(
        (status, topic["partitions"].as_array().map(Vec::len)),
        (200, Some(2))
    );
    // A letter, as leases past `maxAttempts` write them, redriven to its source.
    let letter = durability::log::NewRecord::keyed("t:0:0", "1");
    log.log.append("letters", 0, vec![letter]).await.unwrap();
    let (status, redriven) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/redrive",
        "/topics/letters/partitions/0/redrive",
        json!({"offsets": [0]})
    );
    assert_eq!(
        (status, &redriven["redriven"][0]["topic"]),
        (200, &json!("t"))
    );

    // Errors.
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/9/records"
    );
    assert_eq!(status, 404);
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records?from=999"
    );
    assert_eq!(status, 400);
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records?limit=0"
    );
    assert_eq!(status, 400);
    let (status, _) = exchange!(&app, document, "get", "/topics/{topic}", "/topics/.hidden");
    assert_eq!(status, 400);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/records",
        "/topics/t/records",
        json!([{"payload": 1}])
    );
    assert_eq!(status, 400);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/groups/{group}/commit",
        "/topics/t/groups/g/commit",
        json!({"offsets": {"0": 999}})
    );
    assert_eq!(status, 400);

    document.assert_every_route_answered();
}

/// JSON Schema counts a number with a whole value as an `integer` however it is written, so
/// the server takes `1.0` and `1e0` wherever the document says `integer` in a body: commit
/// offsets, a cursor's offset, `before` and `delayMs`. `1.5` stays refused.
#[actix::test]
async fn whole_numbers_are_integers_in_bodies() {
    let log = TestLog::with(|_| {});
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    let (_, document) = send(
        &app,
        request("get", "/openapi.json", None, None).to_request(),
    )
    .await;
    let document = &Document::new(document);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records",
        json!([{"payload": 1}, {"payload": 2}])
    );
    assert_eq!(status, 202);

    for (body, status) in [
        (json!({"offsets": {"0": 1.5}}), 400),
        (json!({"offsets": {"0": 1.0}}), 200),
    ] {
        let (answered, _) = exchange!(
            &app,
            document,
            "post",
            "/topics/{topic}/groups/{group}/commit",
            "/topics/t/groups/g/commit",
            body.clone()
        );
        assert_eq!(answered, status, "{body}");
    }
    let (status, cursor) = exchange!(
        &app,
        document,
        "put",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g",
        json!({"offset": 2.0})
    );
    assert_eq!((status, &cursor["cursor"]), (200, &json!(2)));
    let forget = test::TestRequest::post()
        .uri("/topics/t/partitions/0/cold/forget")
        .insert_header(ContentType::json())
        .set_payload(r#"{"before": 1e0}"#)
        .to_request();
    let (status, answer) = send(&app, forget).await;
    assert_documented(
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/cold/forget",
        status,
        &answer,
    );
    assert_eq!(status, 200, "{answer}");

    let (status, lease) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "/topics/t/partitions/0/groups/w/leases?limit=1"
    );
    assert_eq!(status, 200);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack",
        format!(
            "/topics/t/partitions/0/groups/w/leases/{}/nack",
            lease["batchId"].as_str().expect("a batchId")
        ),
        json!({"delayMs": 0.0})
    );
    assert_eq!(status, 204);
}

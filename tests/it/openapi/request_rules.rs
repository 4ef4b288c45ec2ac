//! The request rules that the document states, with this server's limits, and the server's
//! answers at each edge.

use actix_web::{App, test};
use durability::store::MAX_KEY_BYTES;
use serde_json::{Value, json};

use super::{Document, assert_documented, operation, request, send};
use crate::common::TestLog;

/// The document states the rules the server enforces on requests, with this server's limits:
/// `minItems` on both produce bodies and `maxItems` (`log.max_batch_size`) on a partition's, the
/// longest long-poll wait (`server.max_wait_ms`),
/// the dedup key's `minLength`/`maxLength`, `minimum: 0` on every offset, `before` and
/// `delayMs`, the commit's partition-number keys, and a nack body that may be left out but is
/// never `null`. Requests at each edge are then answered as the document says.
#[actix::test]
async fn document_states_the_request_rules() {
    let log = TestLog::with(|config| {
        config.log.max_batch_size = 3;
        config.log.max_record_bytes = 512;
        config.server.max_body_bytes = 4096;
        config.server.max_wait_ms = 250;
    });
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    let (_, document) = send(
        &app,
        request("get", "/openapi.json", None, None).to_request(),
    )
    .await;
    let document = &Document::new(document);
    let schemas = &document["components"]["schemas"];
    let body = |method: &str, path: &str| operation(document, method, path)["requestBody"].clone();

    // Produce bodies.
    let events = body("post", "/topics/{topic}/records");
    let records = body("post", "/topics/{topic}/partitions/{partition}/records");
    assert_eq!(
        events["content"]["application/json"]["schema"]["minItems"],
        1
    );
    assert_eq!(
        records["content"]["application/json"]["schema"]["minItems"],
        1
    );
    assert_eq!(
        records["content"]["application/json"]["schema"]["maxItems"],
        3
    );
    for description in [&events["description"], &records["description"]] {
        let description = description.as_str().expect("a description");
        assert!(
            description.contains("at most 3") || description.contains("1 to 3"),
            "{description}"
        );
        assert!(description.contains("512 bytes"), "{description}");
    }
    for schema in ["EventBody", "RecordBody"] {
        // One form of each part per variant: every variant has the key.
        let variants = schemas[schema]["oneOf"].as_array().expect("variants");
        assert!(variants.len() >= 2, "{schema}");
        for variant in variants {
            let key = &variant["properties"]["key"];
            assert_eq!(key["minLength"], 1, "{schema}");
            assert_eq!(key["maxLength"], MAX_KEY_BYTES, "{schema}");
        }
    }
    let too_large =
        operation(document, "post", "/topics/{topic}/records")["responses"]["413"]["description"]
            .as_str()
            .expect("a 413");
    assert!(too_large.contains("4096 bytes"), "{too_large}");

    // Offsets and delays.
    assert_eq!(schemas["CursorBody"]["properties"]["offset"]["minimum"], 0);
    assert_eq!(schemas["ForgetBody"]["properties"]["before"]["minimum"], 0);
    assert_eq!(schemas["NackBody"]["properties"]["delayMs"]["minimum"], 0);
    let offsets = &schemas["CommitBody"]["properties"]["offsets"];
    assert_eq!(offsets["additionalProperties"]["minimum"], 0);
    assert_eq!(offsets["propertyNames"]["pattern"], "^(0|[1-9][0-9]*)$");
    let read = operation(
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
    );
    for parameter in read["parameters"].as_array().expect("parameters") {
        if ["from", "waitMs"].contains(&parameter["name"].as_str().expect("a name")) {
            assert_eq!(parameter["schema"]["minimum"], 0, "{parameter}");
        }
    }

    // Long polls: the longest wait.
    for (method, path) in [
        ("get", "/topics/{topic}/partitions/{partition}/records"),
        ("get", "/topics/{topic}/groups/{group}/poll"),
    ] {
        let parameters = operation(document, method, path)["parameters"].clone();
        let wait = parameters
            .as_array()
            .expect("parameters")
            .iter()
            .find(|parameter| parameter["name"] == "waitMs")
            .expect("a waitMs parameter")
            .clone();
        let description = wait["description"].as_str().expect("a description");
        assert!(description.contains("cut to 250"), "{description}");
    }

    // The nack body: optional, and an object when sent.
    let nack = body(
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack",
    );
    assert_eq!(nack["required"], false);
    assert_eq!(
        nack["content"]["application/json"]["schema"],
        json!({"$ref": "#/components/schemas/NackBody"})
    );

    // The server at each edge.
    let records = "/topics/t/partitions/0/records";
    let record = |key: &str| json!({"payload": 1, "key": key});
    for (body, status) in [
        (json!([]), 400),
        (json!([record("")]), 400),
        (json!([record(&"k".repeat(MAX_KEY_BYTES + 1))]), 400),
        (json!([record(&"k".repeat(MAX_KEY_BYTES))]), 202),
        (
            json!([{"payload": 1}, {"payload": 2}, {"payload": 3}, {"payload": 4}]),
            400,
        ),
        (json!([{"payload": 1}, {"payload": 2}, {"payload": 3}]), 202),
    ] {
        let (answered, _) = exchange!(
            &app,
            document,
            "post",
            "/topics/{topic}/partitions/{partition}/records",
            records,
            body.clone()
        );
        assert_eq!(answered, status, "{body}");
    }
    for (body, status) in [
        (json!([]), 400),
        (json!([{"partitionKey": "a", "payload": 1, "key": ""}]), 400),
        (
            json!([{"partitionKey": "a", "payload": 1, "key": "k"}]),
            202,
        ),
    ] {
        let (answered, _) = exchange!(
            &app,
            document,
            "post",
            "/topics/{topic}/records",
            "/topics/t/records",
            body.clone()
        );
        assert_eq!(answered, status, "{body}");
    }
    for (body, status) in [
        (json!({"offsets": {"x": 0}}), 400),
        (json!({"offsets": {"": 0}}), 400),
        (json!({"offsets": {"0": -1}}), 400),
        (json!({"offsets": {"0": 0}}), 200),
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
    let (status, _) = exchange!(
        &app,
        document,
        "put",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g",
        json!({"offset": -1})
    );
    assert_eq!(status, 400);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/cold/forget",
        "/topics/t/partitions/0/cold/forget",
        json!({"before": -1})
    );
    assert_eq!(status, 400);
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records?from=-1"
    );
    assert_eq!(status, 400);

    let (status, lease) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "/topics/t/partitions/0/groups/w/leases?limit=1"
    );
    assert_eq!(status, 200);
    let nack = format!(
        "/topics/t/partitions/0/groups/w/leases/{}/nack",
        lease["batchId"].as_str().expect("a batchId")
    );
    for (body, status) in [
        (Some(json!(null)), 400),
        (Some(json!({"delayMs": -1})), 400),
        (None, 204),
    ] {
        let request = request("post", &nack, body.as_ref(), None).to_request();
        let (answered, answer) = send(&app, request).await;
        assert_documented(
            document,
            "post",
            "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack",
            answered,
            &answer,
        );
        assert_eq!(answered, status, "{body:?}");
    }
}

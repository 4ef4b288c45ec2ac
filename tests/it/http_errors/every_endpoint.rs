//! Bad input, table-driven, over every endpoint at once, with a bearer token required and a
//! cursor and a lease in place: each request answers the contract's 4xx code in the JSON error
//! shape, and afterwards the data folder holds no new file and the written partition's bounds,
//! cursors and leases are unchanged.

use actix_web::http::Method;
use actix_web::{App, test};
use durability::store::{MAX_KEY_BYTES, NewRecord};

use super::build;
use crate::common::{TestLog, respond, stored_partitions};

/// One bad request and the answer the contract promises.
struct Case {
    method: Method,
    uri: String,
    body: Option<String>,
    token: Option<&'static str>,
    status: u16,
    code: &'static str,
}

fn case(method: Method, uri: &str, body: Option<&str>, status: u16, code: &'static str) -> Case {
    Case {
        method,
        uri: uri.to_owned(),
        body: body.map(str::to_owned),
        token: Some("s3cret"),
        status,
        code,
    }
}

/// The request of `case`: [`build`]'s, with the case's bearer token.
fn request(case: &Case) -> test::TestRequest {
    let mut request = build(case.method.clone(), &case.uri, case.body.as_deref());
    if let Some(token) = case.token {
        request = request.insert_header(("authorization", format!("Bearer {token}")));
    }
    request
}

/// The table: malformed JSON, wrong types, missing fields, bad offsets and limits, bad names
/// (`/`, `..`, NUL, unicode, spaces, empty, over-long), unknown partitions, oversized bodies and
/// records, wrong or missing tokens, unknown or foreign batch ids, over every endpoint.
fn cases(batch_id: &str) -> Vec<Case> {
    use Method as M;
    let p = "/topics/events/partitions/0";
    let long_topic = "t".repeat(129);
    let long_group = "g".repeat(257);
    let long_key = "k".repeat(MAX_KEY_BYTES + 1);
    let big_record = format!(r#"[{{"payload":"{}"}}]"#, "x".repeat(600));
    let big_body = format!(r#"[{{"payload":"{}"}}]"#, "x".repeat(5000));
    let too_many: String = format!("[{}]", [r#"{"payload":1}"#; 11].join(","));
    let too_many_keyed: String = format!(
        "[{}]",
        [r#"{"partitionKey":"user-1","payload":1}"#; 11].join(",")
    );
    let mut cases = vec![
        // Produce, keyed.
        case(
            M::POST,
            "/topics/events/records",
            Some("[{"),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/records",
            Some(r#"{"partitionKey":"a","payload":1}"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/records",
            Some(r#"[{"payload":1}]"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/records",
            Some(r#"[{"partitionKey":"a"}]"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/records",
            Some(r#"[{"partitionKey":7,"payload":1}]"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/records",
            Some("[]"),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/records",
            Some(r#"[{"partitionKey":"a","payload":1,"key":""}]"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/records",
            Some(&format!(
                r#"[{{"partitionKey":"a","payload":1,"key":"{long_key}"}}]"#
            )),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/records",
            Some(&too_many_keyed),
            400,
            "batch_too_large",
        ),
        case(
            M::POST,
            "/topics/.hidden/records",
            Some(r#"[{"partitionKey":"a","payload":1}]"#),
            400,
            "invalid_name",
        ),
        case(
            M::POST,
            &format!("/topics/{long_topic}/records"),
            Some(r#"[{"partitionKey":"a","payload":1}]"#),
            400,
            "invalid_name",
        ),
        // Produce, direct.
        case(
            M::POST,
            &format!("{p}/records"),
            Some("not json"),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            &format!("{p}/records"),
            Some(r#"[{"key":"k"}]"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            &format!("{p}/records"),
            Some(&too_many),
            400,
            "batch_too_large",
        ),
        case(
            M::POST,
            &format!("{p}/records"),
            Some(&big_record),
            400,
            "record_too_large",
        ),
        case(
            M::POST,
            &format!("{p}/records"),
            Some(&big_body),
            413,
            "payload_too_large",
        ),
        case(
            M::POST,
            "/topics/events/partitions/8/records",
            Some(r#"[{"payload":1}]"#),
            404,
            "unknown_partition",
        ),
        case(
            M::POST,
            "/topics/events/partitions/99999999999999999999/records",
            Some(r#"[{"payload":1}]"#),
            404,
            "unknown_partition",
        ),
        case(
            M::POST,
            "/topics/events/partitions/x/records",
            Some(r#"[{"payload":1}]"#),
            400,
            "invalid_name",
        ),
        case(
            M::POST,
            "/topics/events/partitions/-1/records",
            Some(r#"[{"payload":1}]"#),
            400,
            "invalid_name",
        ),
        case(
            M::POST,
            "/topics/ev%2Fil/partitions/0/records",
            Some(r#"[{"payload":1}]"#),
            400,
            "invalid_name",
        ),
        case(
            M::POST,
            "/topics/ev%00il/partitions/0/records",
            Some(r#"[{"payload":1}]"#),
            400,
            "invalid_name",
        ),
        case(
            M::POST,
            "/topics/%C3%A9v/partitions/0/records",
            Some(r#"[{"payload":1}]"#),
            400,
            "invalid_name",
        ),
        case(
            M::POST,
            "/topics/e%20v/partitions/0/records",
            Some(r#"[{"payload":1}]"#),
            400,
            "invalid_name",
        ),
        case(
            M::POST,
            "/topics/../partitions/0/records",
            Some(r#"[{"payload":1}]"#),
            400,
            "invalid_name",
        ),
        // Read.
        case(
            M::GET,
            &format!("{p}/records?from=-1"),
            None,
            400,
            "invalid_offset",
        ),
        case(
            M::GET,
            &format!("{p}/records?from=99"),
            None,
            400,
            "invalid_offset",
        ),
        case(
            M::GET,
            &format!("{p}/records?from=abc"),
            None,
            400,
            "invalid_request",
        ),
        case(
            M::GET,
            &format!("{p}/records?from=99999999999999999999"),
            None,
            400,
            "invalid_request",
        ),
        case(
            M::GET,
            &format!("{p}/records?limit=0"),
            None,
            400,
            "invalid_request",
        ),
        case(
            M::GET,
            &format!("{p}/records?limit=-5"),
            None,
            400,
            "invalid_request",
        ),
        case(
            M::GET,
            &format!("{p}/records?limit=ten"),
            None,
            400,
            "invalid_request",
        ),
        case(
            M::GET,
            &format!("{p}/records?waitMs=-1"),
            None,
            400,
            "invalid_request",
        ),
        // Poll and commit.
        case(
            M::GET,
            "/topics/events/groups/a%2Fb/poll",
            None,
            400,
            "invalid_name",
        ),
        case(
            M::GET,
            &format!("/topics/events/groups/{long_group}/poll"),
            None,
            400,
            "invalid_name",
        ),
        case(
            M::GET,
            "/topics/events/groups/search/poll?limit=0",
            None,
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/groups/search/commit",
            Some(r#"{"offsets":{"0":99}}"#),
            400,
            "invalid_offset",
        ),
        case(
            M::POST,
            "/topics/events/groups/search/commit",
            Some(r#"{"offsets":{"0":-1}}"#),
            400,
            "invalid_offset",
        ),
        case(
            M::POST,
            "/topics/events/groups/search/commit",
            Some(r#"{"offsets":{"9":1}}"#),
            404,
            "unknown_partition",
        ),
        case(
            M::POST,
            "/topics/events/groups/search/commit",
            Some(r#"{"offsets":{"zero":1}}"#),
            400,
            "invalid_name",
        ),
        case(
            M::POST,
            "/topics/events/groups/search/commit",
            Some(r#"{"offsets":[1]}"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/groups/search/commit",
            Some("{}"),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/groups/search/commit",
            Some(r#"{"offsets":{"0":1.5}}"#),
            400,
            "invalid_request",
        ),
        // Cursors.
        case(
            M::PUT,
            &format!("{p}/cursors/search"),
            Some(r#"{"offset":"1"}"#),
            400,
            "invalid_request",
        ),
        case(
            M::PUT,
            &format!("{p}/cursors/search"),
            Some("{}"),
            400,
            "invalid_request",
        ),
        case(
            M::PUT,
            &format!("{p}/cursors/search"),
            Some(r#"{"offset":99}"#),
            400,
            "invalid_offset",
        ),
        case(
            M::PUT,
            &format!("{p}/cursors/bad%20group"),
            Some(r#"{"offset":1}"#),
            400,
            "invalid_name",
        ),
        case(
            M::DELETE,
            &format!("{p}/cursors/bad%2Fgroup"),
            None,
            400,
            "invalid_name",
        ),
        case(
            M::GET,
            "/topics/events/partitions/8/cursors",
            None,
            404,
            "unknown_partition",
        ),
        // Leases.
        case(
            M::POST,
            &format!("{p}/groups/workers/leases?limit=0"),
            None,
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            &format!("{p}/groups/workers/leases/no-such-batch/ack"),
            None,
            409,
            "lease_not_held",
        ),
        case(
            M::POST,
            &format!("{p}/groups/other/leases/{batch_id}/ack"),
            None,
            409,
            "lease_not_held",
        ),
        case(
            M::POST,
            &format!("{p}/groups/other/leases/{batch_id}/nack"),
            None,
            409,
            "lease_not_held",
        ),
        case(
            M::POST,
            &format!("{p}/groups/other/leases/{batch_id}/extend"),
            None,
            409,
            "lease_not_held",
        ),
        case(
            M::POST,
            &format!("{p}/groups/workers/leases/{batch_id}/nack"),
            Some(r#"{"delayMs":-1}"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            &format!("{p}/groups/workers/leases/{batch_id}/nack"),
            Some(r#"{"delayMs":"soon"}"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            "/topics/events/groups/work%20ers/leases",
            None,
            400,
            "invalid_name",
        ),
        // Operations.
        case(
            M::GET,
            "/topics/events/partitions/8/bounds",
            None,
            404,
            "unknown_partition",
        ),
        case(
            M::GET,
            "/topics/events/partitions/%20/load",
            None,
            400,
            "invalid_name",
        ),
        case(
            M::POST,
            "/topics/events/partitions/8/trim",
            None,
            404,
            "unknown_partition",
        ),
        case(
            M::POST,
            &format!("{p}/cold/forget"),
            Some(r#"{"before":-3}"#),
            400,
            "invalid_offset",
        ),
        case(
            M::POST,
            &format!("{p}/cold/forget"),
            Some(r#"{"after":3}"#),
            400,
            "invalid_request",
        ),
        // A redrive reads letters: none asked, an offset past the end, and a record that is
        // not a letter (the written partition's own records have no `topic:partition:offset`
        // key) are refused before anything is appended.
        case(
            M::POST,
            &format!("{p}/redrive"),
            Some(r#"{"offsets":[]}"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            &format!("{p}/redrive"),
            Some(r#"{"offsets":[99]}"#),
            400,
            "invalid_offset",
        ),
        case(
            M::POST,
            &format!("{p}/redrive"),
            Some(r#"{"offsets":[0]}"#),
            400,
            "invalid_request",
        ),
        case(
            M::POST,
            &format!("{p}/redrive"),
            Some(r#"{"offsets":[-1]}"#),
            400,
            "invalid_offset",
        ),
        case(
            M::POST,
            "/topics/events/partitions/8/redrive",
            Some(r#"{"offsets":[0]}"#),
            404,
            "unknown_partition",
        ),
        case(
            M::GET,
            "/topics/e%20vents/groups",
            None,
            400,
            "invalid_name",
        ),
        case(M::GET, "/topics/..", None, 400, "invalid_name"),
        case(
            M::GET,
            "/topics//partitions/0/bounds",
            None,
            404,
            "not_found",
        ),
        case(M::GET, "/nowhere", None, 404, "not_found"),
    ];
    // Authentication: missing and wrong tokens, on a read and on a write.
    for (method, uri, body) in [
        (M::GET, format!("{p}/bounds"), None),
        (M::POST, format!("{p}/records"), Some(r#"[{"payload":1}]"#)),
    ] {
        cases.push(Case {
            token: None,
            ..case(method.clone(), &uri, body, 401, "unauthorized")
        });
        cases.push(Case {
            token: Some("wrong"),
            ..case(method, &uri, body, 401, "unauthorized")
        });
    }
    cases
}

/// Every bad request answers its 4xx code and changes nothing: no new file in the data folder,
/// and the written partition's bounds and cursors and the group's leases are as before.
#[actix::test]
async fn bad_input_changes_nothing() {
    let t = TestLog::with(|config| {
        config.server.auth_token = "s3cret".into();
        config.server.max_body_bytes = 4096;
        config.log.max_batch_size = 10;
        config.log.max_record_bytes = 512;
    });
    t.log
        .append("events", 0, vec![NewRecord::new("1"), NewRecord::new("2")])
        .await
        .unwrap();
    t.log.commit("events", 0, "search", 1).await.unwrap();
    let lease = t
        .log
        .lease("events", 0, "workers", Some(1))
        .await
        .unwrap()
        .expect("a lease");
    let files = stored_partitions(&t.config.storage.data_dir);
    let bounds = t.log.bounds("events", 0).await.unwrap();
    let cursors = t.log.cursors("events", 0).await.unwrap();
    let leases = t.log.leases("events", 0, "workers").await.unwrap();

    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let cases = cases(&lease.batch_id);
    for case in &cases {
        let (status, body) = respond(&app, request(case).to_request()).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (case.status, Some(case.code)),
            "{} {}: {body}",
            case.method,
            case.uri
        );
        assert!(
            body["error"]["message"].is_string(),
            "{} {}: {body}",
            case.method,
            case.uri
        );
    }
    eprintln!("bad inputs tried: {}", cases.len());

    assert_eq!(
        stored_partitions(&t.config.storage.data_dir),
        files,
        "no partition was created"
    );
    assert_eq!(t.log.bounds("events", 0).await.unwrap(), bounds);
    assert_eq!(t.log.cursors("events", 0).await.unwrap(), cursors);
    assert_eq!(t.log.leases("events", 0, "workers").await.unwrap(), leases);
    assert!(
        t.log
            .topics()
            .await
            .unwrap()
            .iter()
            .all(|topic| topic.name == "events")
    );
}

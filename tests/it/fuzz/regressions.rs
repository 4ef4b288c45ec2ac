//! Regressions found by the fuzzing: each failing case a run found, kept as an explicit test.

use actix_web::App;
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::Method;
use actix_web::test as actix_test;

use super::requests::{POISON, fuzz_log};

/// A test request `method uri` with an optional JSON body.
fn request_to(method: Method, uri: &str, body: Option<&str>) -> actix_test::TestRequest {
    let mut builder = actix_test::TestRequest::default().method(method).uri(uri);
    if let Some(body) = body {
        builder = builder
            .insert_header(("content-type", "application/json"))
            .set_payload(body.to_owned());
    }
    builder
}

/// Sends `request` to `app` on a task of its own, so that a handler panic is reported as
/// `Err` with the panic's message instead of unwinding through the test: status and body
/// text otherwise.
async fn send_catching<S, R, B>(app: &std::rc::Rc<S>, request: R) -> Result<(u16, String), String>
where
    S: Service<R, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    R: 'static,
    B: MessageBody + 'static,
{
    let app = app.clone();
    let task = actix::spawn(async move {
        let response = actix_test::call_service(&*app, request).await;
        let status = response.status().as_u16();
        let bytes = actix_test::read_body(response).await;
        (status, String::from_utf8_lossy(&bytes).into_owned())
    });
    task.await.map_err(|err| match err.try_into_panic() {
        Ok(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic without a message".to_owned()),
        Err(err) => err.to_string(),
    })
}

/// Regression (found by `fuzz_every_route_with_arbitrary_requests`): a payload that is valid
/// JSON grammar but that `serde_json::Value` cannot hold (a lone UTF-16 surrogate escape such
/// as `"\ud800"`, a number out of `f64` range such as `1E400`) must be refused with a 400 or
/// stored and read back; reading it back must never panic the handler. Checked on a direct
/// read, a group poll and a lease claim.
#[actix::test]
async fn payload_that_json_values_cannot_hold_never_panics_a_reader() {
    let mut failures = Vec::new();
    let nested = [
        r#"{"a":"x\udc00y"}"#,
        r#"["\ud800\u0041"]"#,
        r#"{"n":[-1e999]}"#,
    ];
    let payloads = POISON.iter().copied().chain(nested);
    for payload in payloads {
        let t = fuzz_log();
        let app = std::rc::Rc::new(
            actix_test::init_service(
                App::new().configure(durability::http::service(t.log.clone())),
            )
            .await,
        );
        let body = format!(r#"[{{"payload": {payload}}}]"#);
        let uri = "/topics/events/partitions/0/records";
        let produced = send_catching(
            &app,
            request_to(Method::POST, uri, Some(&body)).to_request(),
        )
        .await;
        match produced {
            Ok((202, _)) => {}
            Ok((400, answer)) if answer.contains("invalid_request") => continue,
            other => {
                failures.push(format!("POST {uri} with the payload {payload}: {other:?}"));
                continue;
            }
        }
        let reads = [
            (Method::GET, "/topics/events/partitions/0/records"),
            (Method::GET, "/topics/events/groups/g1/poll"),
            (Method::POST, "/topics/events/partitions/0/groups/g1/leases"),
        ];
        for (method, uri) in reads {
            match send_catching(&app, request_to(method.clone(), uri, None).to_request()).await {
                Ok((200, _)) => {}
                Ok(answer) => failures.push(format!("{method} {uri} after the payload {payload}: {answer:?}")),
                Err(panic) => failures.push(format!(
                    "{method} {uri} after the payload {payload} was accepted: the handler panicked: {panic}"
                )),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

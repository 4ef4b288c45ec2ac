//! The OpenAPI document at `GET /openapi.json`. It is an OpenAPI 3 document that lists every
//! route of the REST API (the README's table, "REST API") with its methods, and it sits behind
//! the bearer token.
//! Its schemas describe what the server really answers: real requests are checked against
//! them, status code and body.
//!
//! - [`document`]: the document itself: every route with its statuses and parameters, the
//!   shared error schema, and the bearer token it requires (or not);
//! - [`answers`]: real answers of every route, successes and errors, checked against it;
//! - [`request_rules`]: the request rules and limits it states, and the server at each edge;
//! - [`schema`]: the JSON Schema subset that the checks above use.

use std::cell::RefCell;
use std::collections::BTreeSet;

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::Method;
use actix_web::http::header::{AUTHORIZATION, ContentType};
use actix_web::test;
use serde_json::Value;

use schema::check;

/// A served OpenAPI document, and the operations whose answers a test checked against it (see
/// [`Document::assert_every_route_answered`]). It derefs to the document's JSON.
struct Document {
    json: Value,
    answered: RefCell<BTreeSet<(String, String)>>,
}

impl Document {
    fn new(json: Value) -> Self {
        Self {
            json,
            answered: RefCell::default(),
        }
    }

    /// The document's response `status` of `method template`, noting that the operation
    /// answered; panics when the operation does not list that status.
    fn response(&self, method: &str, template: &str, status: u16, body: &Value) -> &Value {
        let response = &operation(self, method, template)["responses"][status.to_string()];
        assert!(
            response.is_object(),
            "{method} {template} answered {status}, which the document does not list: {body}"
        );
        self.answered
            .borrow_mut()
            .insert((method.to_owned(), template.to_owned()));
        response
    }

    /// Panics unless every operation of the document answered a request of the test, so that a
    /// route added to the document cannot go unchecked.
    fn assert_every_route_answered(&self) {
        let every: BTreeSet<(String, String)> = crate::common::routes()
            .iter()
            .map(|route| {
                (
                    route.method.as_str().to_ascii_lowercase(),
                    route.path.clone(),
                )
            })
            .collect();
        let answered = self.answered.borrow();
        let missing: Vec<_> = every.difference(&answered).collect();
        assert!(
            missing.is_empty(),
            "no answer of these operations was checked: {missing:?}"
        );
    }
}

impl std::ops::Deref for Document {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.json
    }
}

/// Sends `request` and returns the status and the JSON body (`Null` when empty).
async fn send<S, R, B>(app: &S, request: R) -> (u16, Value)
where
    S: Service<R, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let response = test::call_service(app, request).await;
    let status = response.status().as_u16();
    let body = test::read_body(response).await;
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).expect("a JSON body")
    };
    (status, body)
}

/// A request with `method` to `uri`, with a JSON body and a bearer token when given.
fn request(
    method: &str,
    uri: &str,
    body: Option<&Value>,
    token: Option<&str>,
) -> test::TestRequest {
    let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).expect("a method");
    let mut request = test::TestRequest::default().method(method).uri(uri);
    if let Some(body) = body {
        request = request
            .insert_header(ContentType::json())
            .set_payload(body.to_string());
    }
    if let Some(token) = token {
        request = request.insert_header((AUTHORIZATION, format!("Bearer {token}")));
    }
    request
}

/// Sends a request for the route `$template` (as the document writes it) to `$uri`, with an
/// optional JSON body, checks the answer against the document, and evaluates to
/// `(status, body)`.
macro_rules! exchange {
    ($app:expr, $document:expr, $method:literal, $template:literal, $uri:expr $(, $body:expr)?) => {{
        let body: Option<Value> = None $(.or(Some($body)))?;
        let uri: &str = &$uri;
        let (status, answer) = send($app, request($method, uri, body.as_ref(), None).to_request()).await;
        assert_documented($document, $method, $template, status, &answer);
        (status, answer)
    }};
}

/// The document's operation `method` on `template`.
fn operation<'a>(document: &'a Value, method: &str, template: &str) -> &'a Value {
    let operation = &document["paths"][template][method];
    assert!(
        operation.is_object(),
        "the document has no {method} {template}"
    );
    operation
}

/// Checks an answer against the document: the operation lists its status, and the body matches
/// that response's JSON schema (or is empty when the response has no content).
fn assert_documented(document: &Document, method: &str, template: &str, status: u16, body: &Value) {
    let response = document.response(method, template, status, body);
    let Some(content) = response.get("content") else {
        assert_eq!(
            body,
            &Value::Null,
            "{method} {template} {status}: an undocumented body"
        );
        return;
    };
    let schema = &content["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "{method} {template} {status}: no JSON schema"
    );
    let mut errors = Vec::new();
    check(document, schema, body, "$", &mut errors);
    assert!(
        errors.is_empty(),
        "{method} {template} {status}: the body does not match the document:\n{}\nbody: {body}",
        errors.join("\n")
    );
}

mod answers;
mod document;
mod request_rules;
mod schema;

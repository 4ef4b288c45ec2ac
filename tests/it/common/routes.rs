//! The REST server's routes, read from its OpenAPI document, so that a test that goes over every
//! route takes them from the one place that lists them: a route added to the server (and so to
//! its document) is exercised by those tests without anyone adding it to a list.

use std::sync::OnceLock;

use actix_web::http::Method;
use serde_json::Value;

/// One operation of the OpenAPI document: a method on a path template.
#[derive(Debug)]
pub struct Route {
    /// The method.
    pub method: Method,
    /// The path template, as the document writes it: `/topics/{topic}/records`.
    pub path: String,
    /// The operation's `operationId`.
    pub operation_id: String,
    /// Every status the operation lists, ascending, with the content type of its body (`None`:
    /// no body).
    pub responses: Vec<(u16, Option<String>)>,
    /// Whether the operation takes a request body.
    pub has_body: bool,
    /// The names of its query parameters.
    pub query: Vec<String>,
}

impl Route {
    /// The names of the path's parameters, in order (`topic`, `partition`, ...).
    pub fn path_parameters(&self) -> impl Iterator<Item = &str> {
        self.path.split('/').filter_map(parameter_name)
    }

    /// Whether the path has the parameter `{name}`.
    pub fn has(&self, name: &str) -> bool {
        self.path_parameters().any(|parameter| parameter == name)
    }

    /// The statuses the operation lists, ascending.
    pub fn statuses(&self) -> impl Iterator<Item = u16> + '_ {
        self.responses.iter().map(|(status, _)| *status)
    }

    /// Whether the operation lists `status`; `Some` with the content type of that answer's body
    /// (`None` when it has none).
    pub fn response(&self, status: u16) -> Option<Option<&str>> {
        self.responses
            .iter()
            .find(|(listed, _)| *listed == status)
            .map(|(_, content)| content.as_deref())
    }

    /// The path with each `{name}` replaced by `value(name)`, which must be percent-encoded
    /// already.
    pub fn uri(&self, mut value: impl FnMut(&str) -> String) -> String {
        self.path
            .split('/')
            .map(|segment| match parameter_name(segment) {
                Some(name) => value(name),
                None => segment.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("/")
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.method, self.path, self.operation_id)
    }
}

/// `name` when `segment` is `{name}`.
fn parameter_name(segment: &str) -> Option<&str> {
    segment.strip_prefix('{')?.strip_suffix('}')
}

/// Every operation of the document of a server with the default configuration (no token, so
/// no `401`), by path, then in the order of [`METHODS`].
pub fn routes() -> &'static [Route] {
    static ROUTES: OnceLock<Vec<Route>> = OnceLock::new();
    ROUTES.get_or_init(|| {
        let document = durability::http::openapi::document(&durability::Config::default())
            .to_json()
            .expect("the document serializes");
        operations(&serde_json::from_str(&document).expect("the document is JSON"))
    })
}

/// The route of `routes()` with this `operationId`.
pub fn route(operation_id: &str) -> &'static Route {
    routes()
        .iter()
        .find(|route| route.operation_id == operation_id)
        .unwrap_or_else(|| panic!("the document has no operation {operation_id}"))
}

/// The methods an OpenAPI path item may hold.
const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Every operation of `document`, an OpenAPI document as JSON (the one a server serves, say).
pub fn operations(document: &Value) -> Vec<Route> {
    let paths = document["paths"].as_object().expect("paths");
    let mut routes = Vec::new();
    for (path, item) in paths {
        for method in METHODS {
            let Some(operation) = item.get(*method) else {
                continue;
            };
            let responses = operation["responses"]
                .as_object()
                .unwrap_or_else(|| panic!("{method} {path}: no responses"));
            let mut responses: Vec<(u16, Option<String>)> = responses
                .iter()
                .map(|(status, response)| {
                    let status = status
                        .parse()
                        .unwrap_or_else(|_| panic!("{method} {path}: the status {status}"));
                    let content = response["content"]
                        .as_object()
                        .and_then(|content| content.keys().next().cloned());
                    (status, content)
                })
                .collect();
            responses.sort();
            let query = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|parameter| parameter["in"] == "query")
                .map(|parameter| parameter["name"].as_str().expect("a name").to_owned())
                .collect();
            routes.push(Route {
                method: Method::from_bytes(method.to_ascii_uppercase().as_bytes())
                    .expect("a method"),
                path: path.clone(),
                operation_id: operation["operationId"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{method} {path}: no operationId"))
                    .to_owned(),
                responses,
                has_body: operation.get("requestBody").is_some(),
                query,
            });
        }
    }
    routes
}

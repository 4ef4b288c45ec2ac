//! `/console`: the console in the browser, three static files embedded in the binary (no build
//! step, nothing fetched from elsewhere). They are served without a token: the page asks for
//! one and makes ordinary API calls with it, so it sees what that token may see.

use actix_web::http::header;
use actix_web::{HttpResponse, ResponseError, web};

/// The page, its script and its style, by the name each is served under.
const FILES: [(&str, &str, &str); 3] = [
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("console/index.html"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("console/console.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("console/console.css"),
    ),
];

/// Only the console's own files run: no inline script, nothing from another origin, and no
/// other site may frame it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; \
    frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// Registers `/console` (redirected to `/console/`), `/console/` and its files.
pub fn register(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/console").get(redirect))
        .service(web::resource("/console/").get(index))
        .service(web::resource("/console/{file}").get(file));
}

async fn redirect() -> HttpResponse {
    HttpResponse::PermanentRedirect()
        .insert_header((header::LOCATION, "/console/"))
        .finish()
}

async fn index() -> HttpResponse {
    serve("index.html")
}

async fn file(name: web::Path<String>) -> HttpResponse {
    serve(&name)
}

fn serve(name: &str) -> HttpResponse {
    let Some((_, content_type, body)) = FILES.iter().find(|(file, _, _)| *file == name) else {
        return super::ApiError::new(crate::error::ErrorCode::NotFound, "no such file")
            .error_response();
    };
    HttpResponse::Ok()
        .content_type(*content_type)
        .insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        // Revalidated on every load: the files change with the binary.
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(*body)
}

//! The REST server's routes.

use actix_web::{HttpResponse, web};

/// Registers every route of the server on an actix-web `App`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz));
}

/// `GET /healthz`: the process is up and serving.
async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}

//! Produce: keyed events routed to partitions, and direct appends to one partition.

use actix_web::{HttpResponse, web};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::request::{json_body, partition};
use super::{ApiError, HttpState};
use crate::log::{Event, EventsOutcome};
use crate::store::{AppendOutcome, NewRecord};

/// One event of `POST /topics/{topic}/records`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EventBody {
    partition_key: String,
    payload: Box<RawValue>,
    key: Option<String>,
}

/// One record of `POST /topics/{topic}/partitions/{partition}/records`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordBody {
    payload: Box<RawValue>,
    key: Option<String>,
}

/// `POST /topics/{topic}/records`: `202 {"records": [{"partition", "offset"}, ...]}`.
pub async fn events(
    state: web::Data<HttpState>,
    topic: web::Path<String>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let events: Vec<EventBody> = json_body(body, state.max_body_bytes).await?;
    let events = events
        .into_iter()
        .map(|event| Event {
            partition_key: event.partition_key,
            key: event.key,
            payload: event.payload.get().to_owned(),
        })
        .collect();
    match state.log.append_events(&topic, events).await? {
        EventsOutcome::Appended(placed) => {
            let records: Vec<_> = placed
                .into_iter()
                .map(|(partition, offset)| json!({"partition": partition, "offset": offset}))
                .collect();
            Ok(HttpResponse::Accepted().json(json!({ "records": records })))
        }
        EventsOutcome::Rejected { rejection, .. } => Err(rejection.into()),
    }
}

/// `POST /topics/{topic}/partitions/{partition}/records`: `202 {"offsets": [...], "load": ...}`.
pub async fn records(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let index = partition(&index)?;
    state.log.partitions(&topic)?;
    let records: Vec<RecordBody> = json_body(body, state.max_body_bytes).await?;
    let records = records
        .into_iter()
        .map(|record| NewRecord {
            key: record.key,
            payload: record.payload.get().to_owned(),
        })
        .collect();
    let appended = state.log.append(&topic, index, records).await?;
    match appended.outcome {
        AppendOutcome::Appended { offsets } => {
            Ok(HttpResponse::Accepted().json(json!({ "offsets": offsets, "load": appended.load })))
        }
        AppendOutcome::Rejected(rejection) => Err(rejection.into()),
    }
}

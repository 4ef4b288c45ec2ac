//! Produce: keyed events routed to partitions, and direct appends to one partition.

use actix_web::{HttpResponse, web};

use super::error::ErrorBody;
use super::params;
use super::request::{Object, json_body, partition};
use super::{ApiError, HttpState};
use crate::log::{AppendOutcome, Event, EventsOutcome, NewRecord};
use crate::wire::{AppendedOffsets, EventBody, PlacedRecord, ProducedRecords, RecordBody};

/// `POST /topics/{topic}/records`: `202 {"records": [{"partition", "offset"}, ...]}`.
#[utoipa::path(
    post,
    path = "/topics/{topic}/records",
    tag = "produce",
    operation_id = "produceEvents",
    summary = "Produce keyed events",
    description = "Routes each event to a partition by its `partitionKey`, groups the events by \
        partition and appends each group atomically. The whole request is validated before \
        anything is written.",
    params(params::TopicPath),
    request_body(content = Vec<EventBody>, description = "The events, in order"),
    responses(
        (status = 202, description = "One place per input event, in input order", body = ProducedRecords),
        (status = 400, description = "`invalid_request`, `invalid_name`, `batch_too_large` or `record_too_large`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the write may or may not have happened", body = ErrorBody),
    )
)]
pub async fn events(
    state: web::Data<HttpState>,
    topic: web::Path<String>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let events: Vec<Object<EventBody>> = json_body(body, state.body_limits()).await?;
    let events: Vec<EventBody> = events.into_iter().map(|event| event.0).collect();
    let events: Vec<Event> = events
        .into_iter()
        .enumerate()
        .map(|(index, event)| {
            event
                .event()
                .map_err(|err| ApiError::invalid_request(format!("record {index}: {err}")))
        })
        .collect::<Result<_, ApiError>>()?;
    let bytes = events.iter().map(|event| event.payload.len() as u64).sum();
    let outcome = state.log.append_events(&topic, events).await?;
    match outcome {
        EventsOutcome::Appended(placed) => {
            state.metrics.appended(&topic, placed.len() as u64, bytes);
            let records = placed
                .into_iter()
                .map(|(partition, offset)| PlacedRecord { partition, offset })
                .collect();
            Ok(HttpResponse::Accepted().json(ProducedRecords { records }))
        }
        EventsOutcome::Rejected { rejection, .. } => Err(rejection.into()),
    }
}

/// `POST /topics/{topic}/partitions/{partition}/records`: `202 {"offsets": [...], "load": ...}`.
#[utoipa::path(
    post,
    path = "/topics/{topic}/partitions/{partition}/records",
    tag = "produce",
    operation_id = "appendRecords",
    summary = "Append records to one partition",
    description = "Appends the records to the partition atomically.",
    params(params::PartitionPath),
    request_body(content = Vec<RecordBody>, description = "The records, in order"),
    responses(
        (status = 202, description = "The offsets, in input order, and the partition's load", body = AppendedOffsets),
        (status = 400, description = "`invalid_request`, `invalid_name`, `batch_too_large` or `record_too_large`", body = ErrorBody),
        (status = 404, description = "`unknown_partition`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the write may or may not have happened", body = ErrorBody),
    )
)]
pub async fn records(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let index = partition(&index)?;
    state.log.partitions(&topic)?;
    let records: Vec<Object<RecordBody>> = json_body(body, state.body_limits()).await?;
    let records: Vec<RecordBody> = records.into_iter().map(|record| record.0).collect();
    let records: Vec<NewRecord> = records
        .into_iter()
        .enumerate()
        .map(|(index, record)| {
            record
                .record()
                .map_err(|err| ApiError::invalid_request(format!("record {index}: {err}")))
        })
        .collect::<Result<_, ApiError>>()?;
    let bytes = records
        .iter()
        .map(|record| record.payload.len() as u64)
        .sum();
    let appended = state.log.append(&topic, index, records).await?;
    match appended.outcome {
        AppendOutcome::Appended { offsets } => {
            state.metrics.appended(&topic, offsets.len() as u64, bytes);
            Ok(HttpResponse::Accepted().json(AppendedOffsets {
                offsets,
                load: appended.load,
            }))
        }
        AppendOutcome::Rejected(rejection) => Err(rejection.into()),
    }
}

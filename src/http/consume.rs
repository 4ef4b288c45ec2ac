//! Read and consume: pages of records (with long-poll), group polls and commits, cursors.

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use super::request::{Query, json_body, offset, partition};
use super::{ApiError, HttpState};
use crate::store::{Page, Record};

/// A record as the API shows it: the payload is the stored JSON value itself.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordJson {
    offset: u64,
    key: Option<String>,
    payload: Box<RawValue>,
    appended_at: i64,
}

impl From<Record> for RecordJson {
    fn from(record: Record) -> Self {
        // Records appended through the library may hold text that is not JSON: show it as a
        // JSON string rather than fail the page.
        let payload = RawValue::from_string(record.payload).unwrap_or_else(|err| {
            let text = serde_json::to_string(&err.to_string()).expect("a string serializes");
            RawValue::from_string(text).expect("a JSON string is JSON")
        });
        Self {
            offset: record.offset,
            key: record.key,
            payload,
            appended_at: record.appended_at,
        }
    }
}

/// Records as the API shows them.
pub fn records_json(records: Vec<Record>) -> Vec<RecordJson> {
    records.into_iter().map(RecordJson::from).collect()
}

fn page_json(page: Page) -> serde_json::Value {
    json!({ "records": records_json(page.records), "nextOffset": page.next_offset, "lag": page.lag })
}

/// `GET /topics/{topic}/partitions/{partition}/records?from=&limit=&waitMs=`.
pub async fn read(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let index = partition(&index)?;
    let query = Query::parse(request.query_string())?;
    let (from, limit, wait) = (query.from()?, query.limit()?, query.wait()?);
    let page = state
        .log
        .read_wait(&topic, index, from, limit, wait)
        .await?;
    Ok(HttpResponse::Ok().json(page_json(page)))
}

/// `GET /topics/{topic}/groups/{group}/poll?limit=&waitMs=`.
pub async fn poll(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    request: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let (topic, group) = path.into_inner();
    let query = Query::parse(request.query_string())?;
    let pages = state
        .log
        .poll(&topic, &group, query.limit()?, query.wait()?)
        .await?;
    let partitions: Vec<_> = pages
        .into_iter()
        .enumerate()
        .map(|(partition, page)| {
            json!({
                "partition": partition,
                "records": records_json(page.records),
                "nextOffset": page.next_offset,
                "lag": page.lag,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "partitions": partitions })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitBody {
    offsets: BTreeMap<String, i64>,
}

/// `POST /topics/{topic}/groups/{group}/commit` with `{"offsets": {"0": 12}}`: every
/// partition and offset is checked before any is committed.
pub async fn commit(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (topic, group) = path.into_inner();
    let partitions = state.log.partitions(&topic)?;
    crate::names::validate_group(&group).map_err(|err| ApiError::invalid_name(err.to_string()))?;
    let body: CommitBody = json_body(body, state.max_body_bytes).await?;
    let mut commits = Vec::with_capacity(body.offsets.len());
    for (index, value) in &body.offsets {
        let index = partition(index)?;
        if index >= partitions {
            return Err(crate::Error::UnknownPartition {
                topic: topic.clone(),
                partition: index,
                partitions,
            }
            .into());
        }
        let value = offset(*value, "offset")?;
        let next_offset = state.log.bounds(&topic, index).await?.next_offset;
        if value > next_offset {
            return Err(ApiError::new(
                "invalid_offset",
                format!("offset {value} is beyond partition {index}'s next offset {next_offset}"),
            ));
        }
        commits.push((index, value));
    }
    let mut cursors = BTreeMap::new();
    for (index, value) in commits {
        cursors.insert(
            index.to_string(),
            state.log.commit(&topic, index, &group, value).await?,
        );
    }
    Ok(HttpResponse::Ok().json(json!({ "cursors": cursors })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CursorBody {
    offset: i64,
}

/// `PUT /topics/{topic}/partitions/{partition}/cursors/{group}` with `{"offset": 12}`.
pub async fn put_cursor(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String)>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group) = path.into_inner();
    let index = partition(&index)?;
    state.log.partitions(&topic)?;
    let body: CursorBody = json_body(body, state.max_body_bytes).await?;
    let cursor = state
        .log
        .commit(&topic, index, &group, offset(body.offset, "offset")?)
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "cursor": cursor })))
}

/// `GET /topics/{topic}/partitions/{partition}/cursors`.
pub async fn cursors(
    state: web::Data<HttpState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index) = path.into_inner();
    let cursors = state.log.cursors(&topic, partition(&index)?).await?;
    Ok(HttpResponse::Ok().json(json!({ "cursors": cursors })))
}

/// `DELETE /topics/{topic}/partitions/{partition}/cursors/{group}`: `204`, also when there
/// was no such cursor.
pub async fn delete_cursor(
    state: web::Data<HttpState>,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (topic, index, group) = path.into_inner();
    state
        .log
        .delete_cursor(&topic, partition(&index)?, &group)
        .await?;
    Ok(HttpResponse::NoContent().finish())
}

//! Request decoding with the contract's error codes: path parameters, query parameters and
//! JSON bodies.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::web;
use futures_util::StreamExt;
use serde::de::{DeserializeOwned, Visitor};
use serde::{Deserialize, Deserializer};

use super::ApiError;
use crate::error::{Error, ErrorCode};
use crate::log::{StoreError, unsigned_offset};

/// Reads a JSON body of at most `limit` bytes. A body that is a struct must be a JSON object
/// (see [`Object`]; elements of an array body are wrapped in it).
pub async fn json_body<T: DeserializeOwned>(
    mut payload: web::Payload,
    (limit, timeout): (usize, Duration),
) -> Result<T, ApiError> {
    let bytes = body(&mut payload, limit, timeout).await?;
    parse(&bytes)
}

/// Reads an optional JSON body (an empty body is `None`).
pub async fn optional_json_body<T: DeserializeOwned>(
    mut payload: web::Payload,
    (limit, timeout): (usize, Duration),
) -> Result<Option<T>, ApiError> {
    let bytes = body(&mut payload, limit, timeout).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    parse(&bytes).map(Some)
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut json = serde_json::Deserializer::from_slice(bytes);
    T::deserialize(ObjectsOnly(&mut json))
        .and_then(|value| json.end().map(|()| value))
        .map_err(|err| ApiError::invalid_request(format!("invalid JSON body: {err}")))
}

/// A struct that must arrive as a JSON object. serde's derived structs also take an array of
/// their fields in order (`[{"a":1},"key"]` for a record), which no client means.
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(ObjectsOnly(deserializer)).map(Object)
    }
}

/// A deserializer that reads a struct only from a map (a JSON object), and everything else as
/// the one it wraps does.
struct ObjectsOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectsOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The body, at most `limit` bytes, arrived within `timeout`.
async fn body(
    payload: &mut web::Payload,
    limit: usize,
    timeout: Duration,
) -> Result<web::BytesMut, ApiError> {
    let read = async {
        let mut bytes = web::BytesMut::new();
        while let Some(chunk) = payload.next().await {
            let chunk = chunk
                .map_err(|err| ApiError::invalid_request(format!("cannot read the body: {err}")))?;
            if bytes.len() + chunk.len() > limit {
                return Err(too_large(limit));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    actix_web::rt::time::timeout(timeout, read)
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::invalid_request(format!(
                "the body did not arrive within {} ms (server.request_timeout_ms)",
                timeout.as_millis()
            )))
        })
}

/// `413 payload_too_large` for a body over `limit` bytes.
pub fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!("the body exceeds {limit} bytes"),
    )
}

/// A `{partition}` path segment (the naming rule: `400 invalid_name` unless digits).
pub fn partition(segment: &str) -> Result<u32, ApiError> {
    Ok(crate::names::parse_partition(segment).map_err(Error::from)?)
}

/// A partition number as a key of a body's object (`400 invalid_name` unless digits without a
/// leading zero).
pub fn partition_key(key: &str) -> Result<u32, ApiError> {
    Ok(crate::names::parse_partition_key(key).map_err(Error::from)?)
}

/// The query string's parameters.
pub struct Query(HashMap<String, String>);

impl Query {
    /// Parses a query string (`400 invalid_request` if it is malformed).
    pub fn parse(query: &str) -> Result<Self, ApiError> {
        web::Query::<HashMap<String, String>>::from_query(query)
            .map(|query| Self(query.into_inner()))
            .map_err(|err| ApiError::invalid_request(format!("invalid query string: {err}")))
    }

    fn integer(&self, name: &str) -> Result<Option<i64>, ApiError> {
        self.0
            .get(name)
            .map(|value| {
                value.parse::<i64>().map_err(|_| {
                    ApiError::invalid_request(format!("{name} must be an integer, not {value:?}"))
                })
            })
            .transpose()
    }

    /// A text parameter, as given.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// `from`: an offset (negative is `400 invalid_offset`).
    pub fn from(&self) -> Result<Option<u64>, ApiError> {
        self.integer("from")?.map(offset).transpose()
    }

    /// `limit`: a page size. Zero reaches the store's rule; a negative one, which no `usize`
    /// holds, gets that rule's answer here.
    pub fn limit(&self) -> Result<Option<usize>, ApiError> {
        self.integer("limit")?
            .map(|limit| {
                usize::try_from(limit).map_err(|_| Error::from(StoreError::InvalidLimit).into())
            })
            .transpose()
    }

    /// `waitMs`: how long to wait for records, cut to `longest` (negative is invalid).
    pub fn wait(&self, longest: Duration) -> Result<Duration, ApiError> {
        match self.integer("waitMs")? {
            Some(wait) if wait < 0 => Err(ApiError::invalid_request(format!(
                "waitMs {wait} is negative"
            ))),
            wait => Ok(Duration::from_millis(wait.map_or(0, |wait| wait as u64)).min(longest)),
        }
    }
}

/// An offset from a JSON body or a query (`400 invalid_offset` when negative).
pub fn offset(value: i64) -> Result<u64, ApiError> {
    Ok(unsigned_offset(value).map_err(Error::from)?)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Query;

    /// `waitMs` is cut to the server's longest wait; without it there is no wait, and a negative
    /// one is refused.
    #[test]
    fn wait_is_cut_to_the_longest() {
        let longest = Duration::from_millis(100);
        let wait = |query: &str| Query::parse(query).unwrap().wait(longest);
        assert_eq!(wait("waitMs=30000").unwrap(), longest);
        assert_eq!(wait("waitMs=50").unwrap(), Duration::from_millis(50));
        assert_eq!(wait("").unwrap(), Duration::ZERO);
        assert_eq!(wait("waitMs=-1").unwrap_err().code(), "invalid_request");
    }
}

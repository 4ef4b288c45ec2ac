//! Request decoding with the contract's error codes: path parameters, query parameters and
//! JSON bodies.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::web;
use futures_util::StreamExt;
use serde::de::{DeserializeOwned, Error as _, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

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

/// An integer in a JSON body: any JSON number whose value is a whole number that fits an `i64`,
/// however it is written (`12`, `12.0`, `1.2e1`), as JSON Schema's `integer` (and so the API
/// document) counts it. The number's text is read exactly, never through a float, so
/// `1.0000000000000001` stays a fraction and `9007199254740993` stays itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Integer(pub i64);

impl<'de> Deserialize<'de> for Integer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        whole_number(raw.get()).map(Integer).ok_or_else(|| {
            D::Error::custom(format!(
                "expected an integer that fits a signed 64-bit value, found {}",
                raw.get()
            ))
        })
    }
}

/// The value of a JSON text when it is a number whose value is a whole number that fits an
/// `i64`; `None` for anything else (a fraction, out of range, not a number).
fn whole_number(text: &str) -> Option<i64> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(unsigned) => (true, unsigned),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        // An exponent too large for an `i64` still says which side of the point it moves to.
        Some((mantissa, exponent)) => (
            mantissa,
            exponent
                .parse::<i64>()
                .unwrap_or(if exponent.starts_with('-') {
                    i64::MIN
                } else {
                    i64::MAX
                }),
        ),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = || whole.bytes().chain(fraction.bytes());
    if whole.is_empty() || !digits().all(|digit| digit.is_ascii_digit()) {
        return None;
    }
    // The value is `digits` with the decimal point after the first `point` of them.
    let point = (whole.len() as i64).saturating_add(exponent);
    let mut value: i128 = 0;
    for (index, digit) in digits().enumerate() {
        if (index as i64) < point {
            value = value
                .checked_mul(10)?
                .checked_add(i128::from(digit - b'0'))?;
        } else if digit != b'0' {
            return None;
        }
    }
    if value != 0 {
        for _ in (whole.len() + fraction.len()) as i64..point {
            value = value.checked_mul(10)?;
        }
    }
    i64::try_from(if negative { -value } else { value }).ok()
}

/// An offset from a JSON body or a query (`400 invalid_offset` when negative).
pub fn offset(value: i64) -> Result<u64, ApiError> {
    Ok(unsigned_offset(value).map_err(Error::from)?)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Integer, Query, whole_number};

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

    /// A JSON number is an integer when its value is whole, however it is written, and only
    /// when it fits an `i64`; strings, fractions and `null` are not integers.
    #[test]
    fn whole_numbers_in_any_notation() {
        for (text, value) in [
            ("12", 12),
            ("12.0", 12),
            ("1.2e1", 12),
            ("1.2E+1", 12),
            ("120e-1", 12),
            ("0", 0),
            ("-0", 0),
            ("0.000e5", 0),
            ("0e99999999999999999999", 0),
            ("-7.00", -7),
            ("9007199254740993", 9_007_199_254_740_993),
            ("9223372036854775807", i64::MAX),
            ("9223372036854775807.0", i64::MAX),
            ("-9223372036854775808", i64::MIN),
        ] {
            assert_eq!(whole_number(text), Some(value), "{text}");
        }
        for text in [
            "1.5",
            "1.0000000000000001",
            "1e-1",
            "9223372036854775808",
            "-9223372036854775809",
            "1e19",
            "1e99999999999999999999",
            "99999999999999999999999999999999999999999999",
            "\"12\"",
            "null",
            "true",
            "[1]",
        ] {
            assert_eq!(whole_number(text), None, "{text}");
        }
        assert_eq!(serde_json::from_str::<Integer>("8.0").unwrap(), Integer(8));
        assert!(serde_json::from_str::<Integer>("8.5").is_err());
    }
}

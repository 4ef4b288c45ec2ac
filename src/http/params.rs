//! The path and query parameters as the OpenAPI document ([`super::openapi`]) states them.
//! Handlers parse them by hand ([`super::request`]) to answer the contract's error codes, so
//! these types only describe them. The naming rules come from [`crate::names`].

#![expect(
    dead_code,
    reason = "parameter descriptions: read by the OpenAPI derive, never constructed"
)]

use utoipa::IntoParams;
use utoipa::openapi::Required;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};

use crate::log::{DEFAULT_TOPICS_PAGE, MAX_TOPICS_PAGE};
use crate::names::{GROUP_PATTERN, MAX_GROUP_LEN, MAX_TOPIC_LEN, TOPIC_PATTERN};

/// A parameter `in` the path (required) or the query (optional).
fn parameter(in_: ParameterIn, name: &str, description: &str, schema: ObjectBuilder) -> Parameter {
    let required = match in_ {
        ParameterIn::Path => Required::True,
        _ => Required::False,
    };
    ParameterBuilder::new()
        .name(name)
        .parameter_in(in_)
        .required(required)
        .description(Some(description))
        .schema(Some(schema.build()))
        .build()
}

/// A path parameter.
fn path_parameter(name: &str, description: &str, schema: ObjectBuilder) -> Parameter {
    parameter(ParameterIn::Path, name, description, schema)
}

/// A name of [`crate::names`]: a string of 1 to `max_length` characters matching `pattern`.
fn name_schema(max_length: usize, pattern: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(max_length))
        .pattern(Some(pattern))
}

fn topic() -> Parameter {
    path_parameter(
        "topic",
        &format!(
            "The topic: 1 to {MAX_TOPIC_LEN} characters of `A-Z a-z 0-9 . _ -`, not starting \
             with `.` (`400 invalid_name` otherwise)."
        ),
        name_schema(MAX_TOPIC_LEN, TOPIC_PATTERN),
    )
}

fn partition() -> Parameter {
    path_parameter(
        "partition",
        "The partition: `0 .. partitionCount-1` (`404 unknown_partition` past the count, \
         `400 invalid_name` when it is not a non-negative integer).",
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
            .minimum(Some(0)),
    )
}

fn group() -> Parameter {
    path_parameter(
        "group",
        &format!(
            "The consumer group: 1 to {MAX_GROUP_LEN} characters of `A-Z a-z 0-9 . _ - :` \
             (`400 invalid_name` otherwise)."
        ),
        name_schema(MAX_GROUP_LEN, GROUP_PATTERN),
    )
}

fn batch_id() -> Parameter {
    path_parameter(
        "batchId",
        "The `batchId` of the lease.",
        ObjectBuilder::new().schema_type(Type::String),
    )
}

/// Path parameters, listed in the order the path names them.
macro_rules! path_params {
    ($($name:ident: $($parameter:ident),+;)+) => {$(
        pub struct $name;

        impl IntoParams for $name {
            fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
                vec![$($parameter()),+]
            }
        }
    )+};
}

path_params! {
    TopicPath: topic;
    PartitionPath: topic, partition;
    GroupPath: topic, group;
    PartitionGroupPath: topic, partition, group;
    BatchPath: topic, partition, group, batch_id;
}

/// Query of `GET /topics/{topic}/partitions/{partition}/records`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadQuery {
    /// The first offset to read. Defaults to the oldest readable offset. Below it:
    /// `410 log_truncated`. Beyond `nextOffset` or negative: `400 invalid_offset`.
    from: Option<u64>,
    /// The most records to return. Defaults to `maxBatchSize`; larger values are capped to it.
    #[param(minimum = 1)]
    limit: Option<u64>,
    // The document adds this server's `server.max_wait_ms`, which cuts longer waits.
    /// How long to wait, in ms, for a first record when there is none at `from`. Defaults to 0.
    #[param(rename = "waitMs", minimum = 0)]
    wait_ms: Option<u64>,
}

/// Query of `GET /topics`, its range stated from the log's constants.
pub struct TopicsQuery;

impl IntoParams for TopicsQuery {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            parameter(
                ParameterIn::Query,
                "after",
                "List the topics whose names sort after this one (the `next` of the previous \
                 page). Defaults to the first topic. Not a topic name: `400 invalid_request`.",
                name_schema(MAX_TOPIC_LEN, TOPIC_PATTERN),
            ),
            parameter(
                ParameterIn::Query,
                "limit",
                &format!(
                    "The most topics in the page: 1 to {MAX_TOPICS_PAGE}, default \
                     {DEFAULT_TOPICS_PAGE} (`400 invalid_request` outside)."
                ),
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .maximum(Some(MAX_TOPICS_PAGE as f64)),
            ),
        ]
    }
}

/// Query of `GET /topics/{topic}/groups/{group}/poll`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PollQuery {
    /// The most records per partition. Defaults to `maxBatchSize`; larger values are capped
    /// to it.
    #[param(minimum = 1)]
    limit: Option<u64>,
    // The document adds this server's `server.max_wait_ms`, which cuts longer waits.
    /// How long to wait, in ms, for any partition to have records. Defaults to 0.
    #[param(rename = "waitMs", minimum = 0)]
    wait_ms: Option<u64>,
}

/// Query of the lease claims.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LimitQuery {
    /// The most records in a fresh range. Defaults to `maxBatchSize`; larger values are
    /// capped to it.
    #[param(minimum = 1)]
    limit: Option<u64>,
}

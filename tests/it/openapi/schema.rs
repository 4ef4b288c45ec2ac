//! A checker for the subset of JSON Schema that utoipa writes, so that answers can be held to
//! the document's schemas.

use serde_json::{Map, Value};

/// Follows a `$ref` to `#/components/schemas/...` (repeatedly).
pub(super) fn resolve<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
        return schema;
    };
    let name = reference
        .strip_prefix("#/components/schemas/")
        .unwrap_or_else(|| panic!("unexpected $ref {reference}"));
    let target = &document["components"]["schemas"][name];
    assert!(target.is_object(), "dangling $ref {reference}");
    resolve(document, target)
}

/// Checks `value` against `schema`, for the subset of JSON Schema that utoipa writes (`$ref`,
/// `oneOf`, `allOf`, `type`, `enum`, `minimum`, `items`, `properties`, `required`,
/// `additionalProperties`). An object may not carry a field that its schema does not describe,
/// so a field that a handler adds without documenting it fails too.
pub(super) fn check(
    document: &Value,
    schema: &Value,
    value: &Value,
    at: &str,
    errors: &mut Vec<String>,
) {
    let schema = resolve(document, schema);
    if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = options
            .iter()
            .filter(|option| {
                let mut mismatches = Vec::new();
                check(document, option, value, at, &mut mismatches);
                mismatches.is_empty()
            })
            .count();
        if matching != 1 {
            errors.push(format!(
                "{at}: {value} matches {matching} of the oneOf options"
            ));
        }
        return;
    }
    if let Some(members) = schema.get("allOf").and_then(Value::as_array) {
        match value {
            Value::Object(fields) => check_object(document, schema, fields, at, errors),
            _ => members
                .iter()
                .for_each(|member| check(document, member, value, at, errors)),
        }
        return;
    }
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(name) => vec![name.as_str()],
            Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
            other => panic!("{at}: unexpected type {other}"),
        };
        if !types.iter().any(|name| has_type(value, name)) {
            errors.push(format!("{at}: {value} is not of type {types:?}"));
            return;
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(value)
    {
        errors.push(format!("{at}: {value} is not one of {values:?}"));
    }
    if let (Some(minimum), Some(number)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) && number < minimum
    {
        errors.push(format!("{at}: {value} is below the minimum {minimum}"));
    }
    match value {
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (index, element) in items.iter().enumerate() {
                    check(document, item, element, &format!("{at}[{index}]"), errors);
                }
            }
        }
        Value::Object(fields) => check_object(document, schema, fields, at, errors),
        _ => {}
    }
}

/// Whether `value` is of the JSON Schema type `name`.
fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        other => panic!("unknown JSON Schema type {other}"),
    }
}

/// What an object schema and the members of its `allOf` say about an object's fields.
#[derive(Default)]
struct ObjectRules<'a> {
    properties: Map<String, Value>,
    required: Vec<&'a str>,
    additional: Option<&'a Value>,
    described: bool,
}

/// Collects the object rules of `schema` and of its `allOf` members.
fn gather<'a>(document: &'a Value, schema: &'a Value, rules: &mut ObjectRules<'a>) {
    let schema = resolve(document, schema);
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        rules.described = true;
        rules.properties.extend(properties.clone());
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        rules
            .required
            .extend(required.iter().filter_map(Value::as_str));
    }
    if let Some(additional) = schema.get("additionalProperties") {
        rules.described = true;
        rules.additional = Some(additional);
    }
    for member in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        gather(document, member, rules);
    }
}

/// Checks an object's fields: the required ones are there and each one is described.
fn check_object(
    document: &Value,
    schema: &Value,
    fields: &Map<String, Value>,
    at: &str,
    errors: &mut Vec<String>,
) {
    let mut rules = ObjectRules::default();
    gather(document, schema, &mut rules);
    for name in &rules.required {
        if !fields.contains_key(*name) {
            errors.push(format!("{at}: the required field {name} is missing"));
        }
    }
    for (name, field) in fields {
        let at = format!("{at}.{name}");
        match (rules.properties.get(name), rules.additional) {
            (Some(property), _) => check(document, property, field, &at, errors),
            (None, Some(additional)) if additional.is_object() => {
                check(document, additional, field, &at, errors)
            }
            (None, Some(Value::Bool(true))) => {}
            _ if rules.described => errors.push(format!("{at}: the document does not describe it")),
            _ => {}
        }
    }
}

"""A schemathesis check for scripts/api-fuzz, loaded through scripts/api-fuzz.toml."""

import schemathesis


# What each operation may refuse schema-valid data for: an offset past the partition's end
# everywhere, and for a redrive an offset that holds no letter (the log's state decides both).
STATE_REFUSALS = {"redriveLetters": {"invalid_offset", "invalid_request"}}


@schemathesis.check
def refused_only_for_the_logs_state(ctx, response, case):
    """Schema-valid data refused with 400 was refused for what the log holds.

    scripts/api-fuzz.toml lets four operations answer schema-valid data with 400, because an
    offset past `nextOffset`, or one that holds no dead letter, depends on the log's state and
    no schema can state it. This check keeps that allowance to those codes: any other 400 to
    schema-valid data means the document and the server disagree.
    """
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    try:
        code = response.json()["error"]["code"]
    except Exception:  # not the error shape: the schema checks report that
        code = None
    allowed = STATE_REFUSALS.get(case.operation.definition.raw.get("operationId"), {"invalid_offset"})
    if code not in allowed:
        raise AssertionError(
            f"schema-valid data refused with 400 {code}: only {sorted(allowed)} may refuse it "
            "(the log's state)"
        )
    return None

"""A schemathesis check for scripts/api-fuzz, loaded through scripts/api-fuzz.toml."""

import schemathesis


@schemathesis.check
def refused_only_for_an_offset_past_the_log(ctx, response, case):
    """Schema-valid data refused with 400 was refused for an offset past the partition's end.

    scripts/api-fuzz.toml lets three operations answer schema-valid data with 400, because an
    offset past `nextOffset` depends on the log's state and no schema can state it. This check
    keeps that allowance to `invalid_offset`: any other 400 to schema-valid data means the
    document and the server disagree.
    """
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    try:
        code = response.json()["error"]["code"]
    except Exception:  # not the error shape: the schema checks report that
        code = None
    if code != "invalid_offset":
        raise AssertionError(
            f"schema-valid data refused with 400 {code}: only an offset past the partition's "
            "nextOffset (400 invalid_offset) may refuse it"
        )
    return None

"""Schemathesis checks of the gateway's own rule (deploy/local/fuzz-api.sh).

schemathesis refuses a 400 or 422 to a request its generator holds valid
(positive_data_acceptance); the gateway does refuse some schema-valid
requests, for rules JSON Schema cannot say (endsAt after startsAt, a cursor
this API answered, a requestId reused with another payload, ...). Each such
rule is listed on its operation in gateway/openapi.json under
"x-refusals": {status, code, rule}. documented_refusal lets a schema-valid
request be refused only by one of them: the answer's status and error code
must be listed, and where the entry has a rule, the message must start with
it. Anything else is a rule the document does not state: a failure.
"""

import json

import schemathesis
from schemathesis.specs.openapi.checks import is_unexpected_http_status_case


@schemathesis.check
def documented_refusal(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or is_unexpected_http_status_case(case):
        return None
    if not 400 <= response.status_code < 500 or response.status_code in (401, 429):
        return None  # 401: credentials, 429: load — never a rule about the request
    try:
        error = json.loads(response.content)["error"]
        code, message = error["code"], error["message"]
    except (ValueError, KeyError, TypeError):
        raise AssertionError(f"a {response.status_code} without the error body: {response.content[:200]!r}")
    refusals = case.operation.definition.raw.get("x-refusals", [])
    for r in refusals:
        if r["status"] == response.status_code and r["code"] == code and message.startswith(r.get("rule", "")):
            return None
    listed = "; ".join(f'{r["status"]} {r["code"]} {r.get("rule", "")}'.strip() for r in refusals) or "none"
    raise AssertionError(
        f"schema-valid request refused by a rule the document does not state: {response.status_code} {code} "
        f"{message!r}\nx-refusals of {case.operation.label}: {listed}"
    )

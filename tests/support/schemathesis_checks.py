"""A check schemathesis runs beside its own (loaded through SCHEMATHESIS_HOOKS by tests/arbiter/api/
test_schemathesis.py).

Schemathesis's ``positive_data_acceptance`` expects every request the document calls valid to be accepted. The
arbiter also refuses requests that are well formed but break a rule of the channel's state or of fields taken
together (a reply based on a seq not yet written, a capacity below a tier's cost, a tier and an amount both given),
which no JSON schema can say: those are 422 with the code ``invalid``. So the built-in check is told to allow 422,
and this one keeps what it would have caught: a valid request refused by the wire models themselves (400, or
422 ``invalid_field``) means the document allows something the server does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import schemathesis

if TYPE_CHECKING:
    from schemathesis import Case, CheckContext, Response

# The codes the wire models' own validation answers with (arbiter.api.errors.validation_error).
MODEL_REFUSALS = {"invalid_field", "malformed_json"}


@schemathesis.check
def valid_data_passes_the_wire_models(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code not in (400, 422):
        return None
    error = response.json().get("error", {})
    if error.get("code") in MODEL_REFUSALS:
        raise AssertionError(
            f"the document allows this request, but the wire models refused it ({response.status_code}): "
            f"{error.get('message')}"
        )
    return None

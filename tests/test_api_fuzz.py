"""The live HTTP API fuzzed from its own OpenAPI document (schemathesis): every operation with
generated inputs, valid and not, with a server token — no answer is a server error and every
answer matches the document (status, content type, schema), and every request the document calls
invalid is refused (negative data rejection: a handler looser than its schema fails here). Bounded
here (a few dozen examples per operation and mode); ``LB_PROPERTY_SCALE`` runs more (tests/properties.py)."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import given
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from fleet.redis_server import RedisServer

from .properties import bounded
from .test_api import SERVER, api_process

# negative_data_rejection: a request the document calls invalid (a field it does not declare, a
# string where it says integer...) must be refused, so a handler looser than its schema fails here
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
# A refusal is any 4XX the document lists (a body past LB_API_MAX_BODY is refused 413 before its
# fields are read, and schemathesis's default list of refusals has no 413)
CONFIG = SchemathesisConfig.from_dict({"checks": {"negative_data_rejection": {"expected-statuses": ["4XX"]}}})


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(GenerationMode))
def test_every_operation_answers_as_documented(redis_server: RedisServer, mode: GenerationMode) -> None:
    with api_process(redis_server.url, LB_API_MAX_BODY="4096") as url:
        schema = schemathesis.openapi.from_url(url + "/v1/openapi.json", config=CONFIG)
        operations = [result.ok() for result in schema.get_all_operations() if isinstance(result, Ok)]
        assert len(operations) >= 14

        for operation in operations:
            # invalid inputs have more ways to be wrong; a batch's slips are each the body of POST
            # .../scores, fuzzed there, and generating arrays of them is the slowest part of the run
            examples = 40 if mode.is_negative and not operation.path.endswith(":batch") else 10

            @given(case=operation.as_strategy(generation_mode=mode))
            @bounded(examples)
            def answers(case: Any) -> None:
                # the token set on the case itself: a negative case that dropped it is then judged
                # by what was sent (the token present), not by what was generated
                case.headers = {**(case.headers or {}), **SERVER}
                case.call_and_validate(checks=CHECKS, timeout=10)

            answers()

"""The live HTTP API fuzzed from its own OpenAPI document (schemathesis): every operation with
generated inputs, valid and not, with a server token — no answer is a server error and every
answer matches the document (status, content type, schema). Bounded here (a few examples per
operation and mode); ``LB_PROPERTY_SCALE`` runs more (tests/properties.py)."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import given
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from fleet.redis_server import RedisServer

from .properties import bounded
from .test_api import SERVER, api_process

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(GenerationMode))
def test_every_operation_answers_as_documented(redis_server: RedisServer, mode: GenerationMode) -> None:
    with api_process(redis_server.url, LB_API_MAX_BODY="4096") as url:
        schema = schemathesis.openapi.from_url(url + "/v1/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations() if isinstance(result, Ok)]
        assert len(operations) >= 14

        for operation in operations:

            @given(case=operation.as_strategy(generation_mode=mode))
            @bounded(10)
            def answers(case: Any) -> None:
                case.call_and_validate(headers=SERVER, checks=CHECKS, timeout=10)

            answers()

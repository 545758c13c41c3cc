"""OpenAPI 3 import: one function per operation, with parameters, body template and path."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from toolwire.context import Context
from toolwire.demo.tickets import TicketsServer
from toolwire.tools.auth import AuthConfig
from toolwire.tools.http import Connection, FunctionDefinition, http_tools, prepare
from toolwire.tools.openapi import OpenAPIError, import_openapi, load_openapi

SPEC: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Tasks", "version": "1"},
    "servers": [{"url": "https://api.example.com/v1"}],
    "paths": {
        "/projects/{project_id}/tasks": {
            "parameters": [
                {"name": "project_id", "in": "path", "required": True, "schema": {"type": "integer"}}
            ],
            "get": {
                "operationId": "listTasks",
                "summary": "List tasks",
                "parameters": [
                    {
                        "name": "state",
                        "in": "query",
                        "description": "Filter.",
                        "schema": {"enum": ["open", "closed"]},
                    },
                    {"name": "X-Trace", "in": "header", "required": True, "schema": {"type": "string"}},
                ],
            },
            "post": {
                "operationId": "createTask",
                "description": "Create a task.",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewTask"}}},
                },
            },
            "delete": {"operationId": "deleteTasks"},
        },
        "/tasks/{key}": {
            "patch": {
                "parameters": [{"$ref": "#/components/parameters/Key"}],
                "requestBody": {
                    "content": {
                        "application/merge-patch+json": {
                            "schema": {
                                "type": "object",
                                "required": ["key"],
                                "properties": {
                                    "key": {"type": "string"},
                                    "title": {"type": "string", "nullable": True, "example": "x"},
                                    "id": {"type": "integer", "readOnly": True},
                                },
                            }
                        }
                    }
                },
            }
        },
        "/upload": {
            "post": {
                "operationId": "upload",
                "requestBody": {"content": {"multipart/form-data": {"schema": {"type": "object"}}}},
            }
        },
        "/bulk": {
            "put": {
                "operationId": "bulk",
                "requestBody": {"content": {"application/json": {"schema": {"type": "array"}}}},
            }
        },
        "/remote": {"get": {"operationId": "remote", "parameters": [{"$ref": "other.yaml#/p"}]}},
    },
    "components": {
        "schemas": {
            "NewTask": {
                "type": "object",
                "required": ["title"],
                "properties": {
                    "title": {"type": "string", "description": "Short title."},
                    "priority": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
                    "assignee": {"$ref": "#/components/schemas/User"},
                    "labels": {"type": "array", "items": {"type": "string"}},
                },
            },
            "User": {
                "type": "object",
                "properties": {"login": {"type": "string"}, "manager": {"$ref": "#/components/schemas/User"}},
            },
        },
        "parameters": {"Key": {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}},
    },
}
CONNECTION = Connection(name="tasks", url="https://api.example.com/v1")


def by_name(functions: list[FunctionDefinition]) -> dict[str, FunctionDefinition]:
    return {f.name: f for f in functions}


def test_each_operation_becomes_a_function_with_its_parameters_and_path() -> None:
    imported = import_openapi(SPEC, connection=CONNECTION)
    functions = by_name(imported.functions)
    assert list(functions) == ["listTasks", "createTask", "patch_tasks_key"]

    listing = functions["listTasks"]
    assert (listing.method, listing.path, listing.connection) == (
        "GET",
        "/projects/{project_id}/tasks",
        "tasks",
    )
    assert listing.description == "List tasks" and listing.http_request_body is None
    assert listing.parameters == {
        "type": "object",
        "properties": {
            "project_id": {"type": "integer"},
            "state": {"enum": ["open", "closed"], "description": "Filter."},
        },
        "required": ["project_id"],
        "additionalProperties": False,
    }


def test_the_body_template_comes_from_the_request_body_schema() -> None:
    create = by_name(import_openapi(SPEC, connection=CONNECTION).functions)["createTask"]
    assert create.method == "POST"
    assert create.http_request_body == {
        "title": "$title",
        "priority": "$priority",
        "assignee": "$assignee",
        "labels": "$labels",
    }
    properties = create.parameters["properties"]
    assert create.parameters["required"] == ["project_id", "title"]
    # OpenAPI 3.0's boolean exclusiveMinimum becomes JSON Schema's number; $refs are inlined and a
    # reference cycle is cut to an open schema.
    assert properties["priority"] == {"type": "integer", "exclusiveMinimum": 0}
    assert properties["assignee"] == {
        "type": "object",
        "properties": {"login": {"type": "string"}, "manager": {}},
    }
    prepared = prepare(create, CONNECTION, {"project_id": 7, "title": "Bug", "labels": ["ui"]})
    assert prepared.url == "https://api.example.com/v1/projects/7/tasks"
    assert prepared.body == {"title": "Bug", "labels": ["ui"]}


def test_body_properties_that_clash_with_parameters_are_renamed_and_read_only_ones_left_out() -> None:
    patch = by_name(import_openapi(SPEC, connection=CONNECTION).functions)["patch_tasks_key"]
    assert (patch.method, patch.path, patch.description) == ("PATCH", "/tasks/{key}", "PATCH /tasks/{key}")
    assert patch.http_request_body == {"key": "$body_key", "title": "$title"}
    assert patch.parameters["properties"] == {
        "key": {"type": "string"},
        "body_key": {"type": "string"},
        "title": {"type": ["string", "null"]},
    }
    # The body is optional, so only the path parameter is required.
    assert patch.parameters["required"] == ["key"]
    assert prepare(patch, CONNECTION, {"key": "A-1", "title": None}).body == {"title": None}


def test_operations_that_cannot_be_expressed_are_skipped_with_the_reason() -> None:
    skipped = dict(import_openapi(SPEC, connection=CONNECTION).skipped)
    assert set(skipped) == {
        "paths./projects/{project_id}/tasks.delete",
        "paths./upload.post",
        "paths./bulk.put",
        "paths./remote",
    }
    assert "DELETE is not supported" in skipped["paths./projects/{project_id}/tasks.delete"]
    assert "multipart/form-data, not JSON" in skipped["paths./upload.post"]
    assert "not a JSON object" in skipped["paths./bulk.put"]
    assert "outside the document" in skipped["paths./remote"]


def test_an_operation_that_fails_the_definition_checks_is_skipped() -> None:
    spec = {
        "openapi": "3.1.0",
        "paths": {
            "/items/{id}": {
                "get": {"parameters": [{"name": "id", "in": "path", "schema": {"type": "number"}}]}
            }
        },
    }
    imported = import_openapi(spec, connection=CONNECTION)
    assert imported.functions == []
    [(where, why)] = imported.skipped
    assert where == "paths./items/{id}.get"
    assert why.startswith("path: path placeholder {id} must be a required string or integer parameter")


@pytest.mark.parametrize(
    ("document", "words"),
    [({"swagger": "2.0", "paths": {"/x": {}}}, "not an OpenAPI 3"), ({"openapi": "3.0.0"}, "no paths")],
)
def test_documents_that_are_not_openapi_3_are_refused(document: dict[str, Any], words: str) -> None:
    with pytest.raises(OpenAPIError, match=words):
        import_openapi(document, connection=CONNECTION)


def test_load_reads_json_and_reports_broken_files(tmp_path: Path) -> None:
    good = tmp_path / "spec.json"
    good.write_text(json.dumps(SPEC), encoding="utf-8")
    assert load_openapi(good) == SPEC
    broken = tmp_path / "broken.json"
    broken.write_text("{nope", encoding="utf-8")
    with pytest.raises(OpenAPIError, match="not valid JSON"):
        load_openapi(broken)


@pytest.fixture
async def client() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(trust_env=False) as http:
        yield http


async def test_the_tickets_api_imported_from_its_own_openapi_document_works(
    tmp_path: Path, client: httpx2.AsyncClient
) -> None:
    with TicketsServer(tmp_path / "t.db", token="imported-token") as server:
        document = (await client.get(f"{server.base_url}/openapi.json")).json()
        connection = Connection(
            name="tickets",
            url=server.base_url,
            auth=AuthConfig(type="bearer", secrets={"token": "imported-token"}),
        )
        imported = import_openapi(document, connection=connection)
        assert imported.skipped == []
        functions = by_name(imported.functions)
        assert set(functions) == {
            "create_ticket_tickets_post",
            "list_tickets_tickets_get",
            "get_ticket_tickets__ticket_id__get",
        }
        create = functions["create_ticket_tickets_post"]
        # The Idempotency-Key header parameter is not an argument: headers never come from the model.
        assert set(create.parameters["properties"]) == {"title", "priority", "description"}
        assert create.parameters["required"] == ["title", "priority"]

        tools = {t.name: t for t in http_tools(imported.functions, [connection], client=client)}
        created = json.loads(
            await tools["create_ticket_tickets_post"].handler(
                {"title": "Imported", "priority": "Low"}, Context()
            )
        )
        fetched = json.loads(
            await tools["get_ticket_tickets__ticket_id__get"].handler(
                {"ticket_id": created["ticket_id"]}, Context()
            )
        )
        assert fetched["ticket"]["title"] == "Imported" and fetched["ticket"]["priority"] == "Low"

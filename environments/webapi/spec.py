"""The store's HTTP operations as data, and the OpenAPI 3.1 document built from them.

The server routes requests by this table and serves :func:`openapi_document` at
``/openapi.json``; the client builds its tools from that document over HTTP (it never imports
this module). One entry per operation: ``operationId`` is the domain rule's name and the tool's.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from agentgym.environments.webapi.domain import MAX_LINE_QTY

__all__ = ["MAX_ID", "OPERATIONS", "SLEEP_OPERATION", "Operation", "openapi_document"]

# Ids are INTEGER columns: PostgreSQL's is 32-bit, so anything larger is refused with a 422
# here (and by the client before sending) instead of overflowing in the driver (HTTP 500).
MAX_ID = 2**31 - 1
_ID = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
_STATUS = {"type": "string", "enum": ["placed", "shipped", "delivered", "cancelled", "returned"]}
_REASON = {"type": "string", "enum": ["changed_mind", "damaged", "wrong_item", "late", "other"],
           "description": "why the customer asks"}
_TEXT = {"type": "string", "minLength": 1, "maxLength": 200}


@dataclass(frozen=True, slots=True)
class Operation:
    operation_id: str
    method: str
    path: str  # with {name} placeholders for path parameters
    summary: str
    path_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    query: dict[str, dict[str, Any]] = field(default_factory=dict)
    body: dict[str, dict[str, Any]] | None = None  # properties of a JSON object body
    required: tuple[str, ...] = ()  # required query or body fields

    def param_schema(self) -> dict[str, Any]:
        """One JSON schema over path + query + body fields (how the server validates too)."""
        props = {**self.path_params, **self.query, **(self.body or {})}
        req = [*self.path_params, *self.required]
        return {"type": "object", "properties": copy.deepcopy(props), "required": req,
                "additionalProperties": False}


OPERATIONS: list[Operation] = [
    Operation("list_products", "GET", "/products", "Search products by name and/or category.",
              query={"query": {"type": "string", "maxLength": 100, "description": "part of the name"},
                     "category": {"type": "string", "enum": ["footwear", "apparel", "packs", "camping",
                                                             "electronics", "accessories"]}}),
    Operation("get_product", "GET", "/products/{product_id}", "One product with price and stock.",
              path_params={"product_id": _ID}),
    Operation("find_customers", "GET", "/customers", "Find customers by exact email or part of the name "
              "(returns ids and names only).",
              query={"email": {"type": "string", "maxLength": 200}, "name": {"type": "string", "maxLength": 100}}),
    Operation("get_customer", "GET", "/customers/{customer_id}", "A customer's profile (tier, email, address).",
              path_params={"customer_id": _ID}),
    Operation("list_customer_orders", "GET", "/customers/{customer_id}/orders",
              "A customer's orders, optionally only those with one status.",
              path_params={"customer_id": _ID}, query={"status": _STATUS}),
    Operation("get_order", "GET", "/orders/{order_id}", "One order with its items and payments.",
              path_params={"order_id": _ID}),
    Operation("get_cancellation_quote", "GET", "/orders/{order_id}/cancellation-quote",
              "The fee and refund if a placed order were cancelled now.", path_params={"order_id": _ID}),
    Operation("verify_customer", "POST", "/auth/verify", "Verify a customer's identity for this session "
              "with their email and the last 4 digits of their card. Required before any change.",
              body={"email": {"type": "string", "maxLength": 200},
                    "card_last4": {"type": "string", "pattern": "^[0-9]{4}$"}},
              required=("email", "card_last4")),
    Operation("update_customer", "PATCH", "/customers/{customer_id}", "Change the verified customer's "
              "email and/or address.", path_params={"customer_id": _ID},
              body={"email": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+\\.[a-z]+$", "maxLength": 200},
                    "address": _TEXT}),
    Operation("create_order", "POST", "/orders", "Place an order for the verified customer (charges the "
              "card, reserves stock). The address defaults to the customer's.",
              body={"customer_id": _ID,
                    "items": {"type": "array", "minItems": 1, "maxItems": 10, "items": {
                        "type": "object", "additionalProperties": False, "required": ["product_id", "quantity"],
                        "properties": {"product_id": _ID,
                                       "quantity": {"type": "integer", "minimum": 1, "maximum": MAX_LINE_QTY}}}},
                    "shipping_address": _TEXT},
              required=("customer_id", "items")),
    Operation("update_order_address", "PATCH", "/orders/{order_id}", "Change the shipping address of a "
              "placed order of the verified customer.", path_params={"order_id": _ID},
              body={"shipping_address": _TEXT}, required=("shipping_address",)),
    Operation("cancel_order", "POST", "/orders/{order_id}/cancel", "Cancel a placed order of the verified "
              "customer: restocks and refunds the total minus the cancellation fee.",
              path_params={"order_id": _ID}, body={"reason": _REASON}, required=("reason",)),
    Operation("return_order", "POST", "/orders/{order_id}/return", "Return a delivered order of the verified "
              "customer: restocks and refunds the full total.",
              path_params={"order_id": _ID}, body={"reason": _REASON}, required=("reason",)),
]

# Only when the server runs with test endpoints: sleeps, so tests can hit the client timeout.
SLEEP_OPERATION = Operation("sleep", "GET", "/_test/sleep", "Test only: answer after a delay.",
                            query={"seconds": {"type": "number", "minimum": 0, "maximum": 60}},
                            required=("seconds",))


def _parameters(op: Operation) -> list[dict[str, Any]]:
    params = [{"name": n, "in": "path", "required": True, "schema": s} for n, s in op.path_params.items()]
    params += [{"name": n, "in": "query", "required": n in op.required, "schema": s} for n, s in op.query.items()]
    return params


def openapi_document(operations: list[Operation] = OPERATIONS) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        entry: dict[str, Any] = {
            "operationId": op.operation_id, "summary": op.summary, "parameters": _parameters(op),
            "responses": {"200": {"description": "OK"},
                          "4XX": {"description": "Refused: JSON {\"detail\": ...} says why"}}}
        if op.body is not None:
            entry["requestBody"] = {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "properties": copy.deepcopy(op.body),
                "required": [r for r in op.required if r in op.body], "additionalProperties": False}}}}
        paths.setdefault(op.path, {})[op.method.lower()] = entry
    return {"openapi": "3.1.0",
            "info": {"title": "Trailhead Outfitters store API", "version": "1.0.0",
                     "description": "Customer-service API of a small outdoor-gear store."},
            "paths": paths}

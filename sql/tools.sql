-- The tools pg_toolgate ships, and version 1 of their argument contracts (JSON Schema draft
-- 2020-12, additionalProperties false). A DBA adds later versions with toolgate.set_tool_schema.
-- Free text a person will read (a close's reason) holds no control, format or line-separator
-- character: nothing in it can start a line of its own or hide text.

-- A sensitive tool moves money: its policy row must carry max_value and a per-conversation quota.
INSERT INTO toolgate.tools (tool, sensitive, description) VALUES
    ('request_close', false, 'Request that a work order be closed.'),
    ('request_purchase_part', true, 'Buy parts from the catalogue for a work order, charged to a cost centre.');

INSERT INTO toolgate.tool_schemas (tool, version, schema, created_by) VALUES
    ('request_close', 1, $schema$
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["order_id", "reason", "idempotency_key"],
        "properties": {
            "order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
            "reason": {"type": "string", "minLength": 8, "maxLength": 120,
                       "pattern": "^[^\\p{Cc}\\p{Cf}\\p{Zl}\\p{Zp}]*$"},
            "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}
        }
    }
    $schema$, 'pg_toolgate');

-- Quantity is bounded here and again by the part's own limit in the catalogue. The price is not
-- an argument: the value is quantity × the catalogue's unit price.
INSERT INTO toolgate.tool_schemas (tool, version, schema, created_by) VALUES
    ('request_purchase_part', 1, $schema$
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["order_id", "part_id", "quantity", "cost_center", "idempotency_key"],
        "properties": {
            "order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
            "part_id": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,40}$"},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
            "cost_center": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,40}$"},
            "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}
        }
    }
    $schema$, 'pg_toolgate');

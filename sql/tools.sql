-- The tools pg_toolgate ships, and version 1 of their argument contracts (JSON Schema draft
-- 2020-12, additionalProperties false). A DBA adds later versions with toolgate.set_tool_schema.

INSERT INTO toolgate.tools (tool, sensitive, description) VALUES
    ('request_close', false, 'Request that a work order be closed.');

INSERT INTO toolgate.tool_schemas (tool, version, schema, created_by) VALUES
    ('request_close', 1, $schema$
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["order_id", "reason", "idempotency_key"],
        "properties": {
            "order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
            "reason": {"type": "string", "minLength": 8, "maxLength": 120},
            "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}
        }
    }
    $schema$, 'pg_toolgate');

SELECT toolgate.request_close(:technician, 'c-' || :client_id,
       jsonb_build_object('order_id', n::text, 'reason', 'benchmark close', 'idempotency_key', 'denied-key-' || n))
  FROM (SELECT nextval('bench.keys') AS n) s;

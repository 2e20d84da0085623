SELECT toolgate.request_close(:limited, 'c-' || :client_id,
       jsonb_build_object('order_id', n::text, 'reason', 'benchmark close', 'idempotency_key', 'close-key-' || n))
  FROM (SELECT nextval('bench.orders') AS n) s;

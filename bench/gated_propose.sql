SELECT toolgate.request_close(:token1, 'pair-' || n,
       jsonb_build_object('order_id', n::text, 'reason', 'benchmark close', 'idempotency_key', 'pair-key-' || n))
  FROM (SELECT nextval('bench.orders1') AS n) s;

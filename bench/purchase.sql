SELECT toolgate.request_purchase_part(:token, 'c-' || :client_id,
       jsonb_build_object('order_id', (900000101 + :client_id % 64)::text, 'part_id', 'P-1', 'quantity', 1,
                          'cost_center', 'CC-' || (n % 100), 'idempotency_key', 'purchase-key-' || n))
  FROM (SELECT nextval('bench.keys') AS n) s;

SELECT toolgate.call(:token, 'c-' || :client_id, 'erp_purchase_part',
       jsonb_build_object('order_id', (900000165 + :client_id % 64)::text, 'part_id', 'P-1', 'quantity', 1,
                          'idempotency_key', 'outbox-key-' || n))
  FROM (SELECT nextval('bench.outbox_keys') AS n) s;
